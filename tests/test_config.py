import pytest
from tandem.host.common.exp2 import Exp2Params
from tandem.host.common.reciprocal import ReciprocalParams

from tandem.config import ParamError, UserError, resolve_params


def test_defaults_then_file_then_flags(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("design: exp2\nlut_bits: 5\nout_frac_bits: 14\n")
    params = resolve_params(Exp2Params, cfg, ["lut_bits=7"], design="exp2")
    assert (params.lut_bits, params.out_frac_bits, params.in_frac_bits) == (7, 14, 8)


def test_unknown_key_suggests_the_closest(tmp_path):
    with pytest.raises(UserError, match=r"unknown parameter 'lut_bit'.*did you mean 'lut_bits'"):
        resolve_params(Exp2Params, None, ["lut_bit=3"], design="exp2")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("out_frac: 3\n")
    with pytest.raises(UserError, match=r"c\.yaml: unknown parameter 'out_frac'"):
        resolve_params(Exp2Params, cfg, design="exp2")


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("lut_bits=20", r"--set lut_bits=20: lut_bits must be between 1 and 12, not 20"),
        ("lut_bits=true", r"lut_bits must be of type int, not True"),
        ("lut_bits=4.5", r"lut_bits must be of type int, not 4.5"),
        ("lut_bits=10", r"lut_bits must not exceed in_frac_bits \(8\)"),
        ("lut_frac_bits=10", r"lut_frac_bits must be at least out_frac_bits"),
    ],
)
def test_bad_values_name_the_key_and_value(flag, message):
    with pytest.raises(ParamError, match=message):
        resolve_params(Exp2Params, None, [flag], design="exp2")


def test_cross_field_rule_blames_the_file_that_set_it(tmp_path):
    cfg = tmp_path / "r.yaml"
    cfg.write_text("seed_bits: 12\nwork_frac_bits: 8\n")
    with pytest.raises(ParamError, match=r"r\.yaml: seed_bits must not exceed work_frac_bits"):
        resolve_params(ReciprocalParams, cfg, design="reciprocal")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lut_bits: [1\n", r"invalid YAML at line 2"),
        ("- 1\n- 2\n", r"expected a mapping"),
        ("design: reciprocal\n", r"this config is for design 'reciprocal', not 'exp2'"),
    ],
)
def test_bad_files(tmp_path, text, message):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(UserError, match=message):
        resolve_params(Exp2Params, cfg, design="exp2")


def test_missing_file_and_malformed_flag(tmp_path):
    with pytest.raises(UserError, match=r"no such config file"):
        resolve_params(Exp2Params, tmp_path / "nope.yaml")
    with pytest.raises(UserError, match=r"expected key=value"):
        resolve_params(Exp2Params, None, ["lut_bits"])


def test_describe_lists_docs_and_rules():
    infos = {p.name: p for p in Exp2Params.describe()}
    assert infos["lut_bits"].default == 6
    assert infos["lut_bits"].rule == "1..12"
    assert "segments" in infos["lut_bits"].doc
