/* The hpu engine's arithmetic for a batch of requests, token by token as the gateware runs it.

   A compiled twin of tandem.host.hpu.golden.hpu_golden_batch (the specification): same
   inputs, same outputs, bit for bit; tests/test_hpu_golden_native.py compares the two over
   random parameters, lengths, scales and saturating inputs. golden_native.py builds this file
   with the machine's C compiler and calls it through ctypes. Floating point follows the numpy
   model's float64 operations in the same order (built with -ffp-contract=off, no fast-math),
   and every product that float64 holds exactly there is exact here too. int16 K and V (kv_bytes 2) take the numpy
   model's exact integer score (dot * c_mant * k_mant, up to 59 bits, then a shift), and their
   w * v products sum in int64 (below 2**58 over the longest sequence). */

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* hpu_golden_params (the kernel's parameters) and hpu_kv_view (where token t of request r
   keeps its K and V rows and scales: byte offsets from buffer + base[r] + (t / page_tokens)
   * page_stride), generated at build time from PARAM_FIELDS and VIEW_FIELDS of
   golden_native.py, which also makes their ctypes classes. The view describes the device
   memory's KV layout (tandem.mappings.hpu.kv_layout: pages of 32 tokens, each a K part and a
   V part of one scale block and 32 rows), or plain [N, D] arrays as one page. */
#include "golden_native_params.h"

/* Longest head the kernel keeps one query's accumulators for (a local array). */
#define MAX_HEAD_DIM 256

static int64_t shift_round_half_up(int64_t value, int shift) {
    return (value + (((int64_t)1 << shift) >> 1)) >> shift;
}

static int leading_one(int64_t x, int bits) {
    if (x <= 0) return 0;
    int msb = 63 - __builtin_clzll((uint64_t)x);
    return msb < bits - 1 ? msb : bits - 1;
}

/* tandem.host.common.reciprocal.reciprocal_golden for one input. */
static int64_t reciprocal(const hpu_golden_params *p, const int64_t *seed, int64_t x) {
    int64_t top = ((int64_t)1 << p->recip_out_bits) - 1;
    if (x == 0) return top;
    int w = p->recip_work_frac_bits;
    int msb = leading_one(x, p->recip_in_bits);
    int64_t mantissa = (int64_t)((uint64_t)x << w) >> msb;
    int64_t y = seed[(mantissa >> (w - p->recip_seed_bits)) & (((int64_t)1 << p->recip_seed_bits) - 1)];
    for (int step = 0; step < p->recip_newton_steps; step++) {
        int64_t error = shift_round_half_up(mantissa * y, w);
        y = shift_round_half_up(y * (((int64_t)2 << w) - error), w);
    }
    int scale_msb = p->recip_mantissa_only ? p->recip_in_frac_bits : msb;
    int shift = w + scale_msb - p->recip_in_frac_bits - p->recip_out_frac_bits + p->recip_left_shift;
    int64_t result = shift_round_half_up(y << p->recip_left_shift, shift);
    if (result < 0) result = 0;
    if (result > top) result = top;
    return result;
}

/* tandem.host.common.exp2.exp2_golden of -distance (distance >= 0): computed, not a table of
   every input, which a decode step's cold cache would miss on every token. */
static int64_t exp2_of_distance(const hpu_golden_params *p, const int64_t *base,
                                const int64_t *slope, int64_t distance) {
    const int64_t x = -distance;
    const int64_t fraction = x & (((int64_t)1 << p->exp2_in_frac_bits) - 1);
    const int64_t shift = -(x >> p->exp2_in_frac_bits);
    const int64_t index = fraction >> p->exp2_rem_bits;
    const int64_t remainder = fraction & (((int64_t)1 << p->exp2_rem_bits) - 1);
    const int64_t mantissa = base[index] + shift_round_half_up(slope[index] * remainder, p->exp2_rem_bits);
    int64_t total = shift + (p->exp2_lut_frac_bits - p->exp2_out_frac_bits);
    if (total > p->exp2_max_shift) total = p->exp2_max_shift;
    return shift_round_half_up(mantissa, (int)total);
}

/* The value mant * 2**exp the gateware decodes from a binary16 pattern (sign ignored, an
   exponent field of 31 read as a plain exponent; tandem.host.hpu.params.decode_scales). */
static double scale_value(const double *powers, uint16_t bits) {
    const int field = (bits >> 10) & 0x1F;
    const int64_t mant = (bits & 0x3FF) | (field ? 0x400 : 0);
    return (double)mant * powers[field];
}

/* The score of an int16 row: round half up (dot * c_mant * k_mant) * 2**(c_exp + k_exp +
   score_frac_bits) and saturate to [lo, hi] (score_bits wide), in int64 as
   tandem.host.hpu.golden._round_scaled_int does; counts saturations. */
static int64_t round_scaled_int(int64_t dot, uint16_t c_bits, uint16_t k_bits, int frac_bits,
                                int64_t lo, int64_t hi, int64_t *saturated) {
    const int c_field = (c_bits >> 10) & 0x1F, k_field = (k_bits >> 10) & 0x1F;
    const int64_t c_mant = (c_bits & 0x3FF) | (c_field ? 0x400 : 0);
    const int64_t k_mant = (k_bits & 0x3FF) | (k_field ? 0x400 : 0);
    const int shift = (c_field > 1 ? c_field : 1) - 25 + (k_field > 1 ? k_field : 1) - 25 + frac_bits;
    const int64_t product = dot * (c_mant * k_mant);
    int64_t rounded;
    if (shift >= 0) { /* a left shift saturates where the product exceeds the range shifted right */
        const int left = shift > 62 ? 62 : shift;
        if (product > (hi >> left)) rounded = hi + 1;
        else if (product < -((hi + 1) >> left)) rounded = lo - 1;
        else rounded = (int64_t)((uint64_t)product << left);
    } else {
        rounded = shift_round_half_up(product, -shift > 62 ? 62 : -shift);
    }
    const int64_t clipped = rounded < lo ? lo : (rounded > hi ? hi : rounded);
    if (clipped != rounded) (*saturated)++;
    return clipped;
}

/* Round half up and saturate a float64 product (exact) to [lo, hi]; counts saturations. */
static int64_t round_scaled(double product, double lo, double hi, int64_t *saturated) {
    double rounded = floor(product + 0.5);
    double clipped = rounded < lo ? lo : rounded;
    clipped = clipped > hi ? hi : clipped;
    if (clipped != rounded) (*saturated)++;
    return (int64_t)clipped;
}

/* sizeof(hpu_golden_params) (which 0) or sizeof(hpu_kv_view) (which 1), and each field's
   offset into offsets, in declaration order: the test that the ctypes classes lay the
   structs out as the compiler does. */
int64_t hpu_golden_layout(int32_t which, int64_t *offsets) {
    int i = 0;
    if (which == 0) {
#define X(name) offsets[i++] = (int64_t)offsetof(hpu_golden_params, name);
        HPU_GOLDEN_PARAMS_FIELDS
#undef X
        return (int64_t)sizeof(hpu_golden_params);
    }
#define X(name) offsets[i++] = (int64_t)offsetof(hpu_kv_view, name);
    HPU_KV_VIEW_FIELDS
#undef X
    return (int64_t)sizeof(hpu_kv_view);
}

/* R requests, each G queries over the first lengths[r] tokens at base[r] in buffer.

   q [R, G, D] int16; score_scale [R, G] binary16 bit patterns; exp2_base, exp2_slope
   [2 ** lut_bits] the exp2 unit's table; seed [2 ** recip_seed_bits].
   Outputs: m, l [R, G]; o, y [R, G, D]; saturated [R, 3] (score, weight, output);
   work [N] int64 scratch for one query's scores, N = max(lengths); factors [2 N] float64
   and row_pointers [2 N] scratch for one request's per-token scale factors and rows. */
void hpu_golden_batch(const hpu_golden_params *p, const hpu_kv_view *view, int64_t requests,
                      int64_t rows, const int16_t *q, const uint16_t *score_scale,
                      const uint8_t *buffer, const int64_t *base, const int64_t *lengths,
                      const int64_t *exp2_base, const int64_t *exp2_slope,
                      const int64_t *seed, int64_t *m_out, int64_t *l_out, int64_t *o_out,
                      int64_t *y_out, int64_t *saturated, int64_t *work, double *factors,
                      const uint8_t **row_pointers, uint16_t *k_scale_bits) {
    const int g_count = p->gqa_group, d = p->head_dim;
    const int64_t unit = (int64_t)1 << p->score_frac_bits;
    const double score_lo = -ldexp(1.0, p->score_bits - 1), score_hi = ldexp(1.0, p->score_bits - 1) - 1;
    const int64_t score_lo_int = -((int64_t)1 << (p->score_bits - 1)), score_hi_int = -score_lo_int - 1;
    const int wide = p->kv_bytes == 2;
    const double weight_hi = ldexp(1.0, p->weight_bits) - 1;
    const int64_t out_lo = -((int64_t)1 << (p->out_bits - 1)), out_hi = ((int64_t)1 << (p->out_bits - 1)) - 1;
    const int64_t o_lo = -((int64_t)1 << (p->out_operand_bits - 1)), o_hi = ((int64_t)1 << (p->out_operand_bits - 1)) - 1;
    const double score_unit = ldexp(1.0, p->score_frac_bits);
    double powers[32]; /* 2**(max(field, 1) - 25) per exponent field, exact */
    for (int field = 0; field < 32; field++) powers[field] = ldexp(1.0, (field > 1 ? field : 1) - 25);
    for (int64_t r = 0; r < requests; r++) {
        const int64_t n = lengths[r];
        const uint8_t *region = buffer + base[r];
        int64_t *sat = saturated + r * 3;
        sat[0] = sat[1] = sat[2] = 0;
        /* per-token factors, shared by the G queries: k_scale * 2**score_frac_bits and
           v_scale * weight_shift, the inner products of the numpy model's expressions */
        double *k_factor = factors, *v_factor = factors + rows;
        const uint8_t **k_row = row_pointers, **v_row = row_pointers + rows;
        for (int64_t t = 0; t < n; t++) {
            const uint8_t *page = region + (t / view->page_tokens) * view->page_stride;
            const int64_t slot = t % view->page_tokens;
            uint16_t k_bits, v_bits;
            memcpy(&k_bits, page + view->k_scales + 2 * slot, 2); /* little-endian hosts */
            memcpy(&v_bits, page + view->v_scales + 2 * slot, 2);
            k_scale_bits[t] = k_bits;
            k_factor[t] = scale_value(powers, k_bits) * score_unit;
            v_factor[t] = scale_value(powers, v_bits) * p->weight_shift;
            k_row[t] = page + view->k_rows + slot * view->row_stride;
            v_row[t] = page + view->v_rows + slot * view->row_stride;
        }
        for (int gi = 0; gi < g_count; gi++) {
            const int64_t row = r * g_count + gi;
            const int16_t *qr = q + row * d;
            const double c = scale_value(powers, score_scale[row]);
            /* scores: s = dot * (c * (k_scale * 2**score_frac_bits)), as the numpy model */
            for (int64_t t = 0; t < n && wide; t++) { /* int16 rows: the exact integer score */
                const int16_t *kt = (const int16_t *)k_row[t]; /* little-endian hosts */
                int64_t dot = 0;
                for (int e = 0; e < d; e++) dot += (int64_t)qr[e] * kt[e];
                work[t] = round_scaled_int(dot, score_scale[row], k_scale_bits[t], p->score_frac_bits,
                                           score_lo_int, score_hi_int, &sat[0]);
            }
            for (int64_t t = 0; t < n && !wide; t++) {
                const int8_t *kt = (const int8_t *)k_row[t];
                int64_t dot;
                if (p->dot_fits_int32) {
                    int32_t acc = 0;
                    for (int e = 0; e < d; e++) acc += (int32_t)qr[e] * (int32_t)kt[e];
                    dot = acc;
                } else {
                    int64_t acc = 0;
                    for (int e = 0; e < d; e++) acc += (int64_t)qr[e] * kt[e];
                    dot = acc;
                }
                double factor = c * k_factor[t];
                work[t] = round_scaled((double)dot * factor, score_lo, score_hi, &sat[0]);
            }
            /* online softmax and the value accumulator, one token at a time; the running max is
               an integer in log2 units, so the rescale is a shift */
            int64_t running = p->max_start, l_acc = 0;
            int64_t o[MAX_HEAD_DIM]; /* a local array no pointer aliases */
            for (int e = 0; e < d; e++) o[e] = 0;
            for (int64_t t = 0; t < n; t++) {
                const int64_t s = work[t];
                const int64_t top = (s + unit - 1) >> p->score_frac_bits; /* ceil(s) */
                int shift = 0;
                if (top > running) { /* alpha = 2**-shift; a shift of 62 leaves 0, as any past
                                        the widths of l and o does */
                    shift = top - running > 62 ? 62 : (int)(top - running);
                    running = top;
                }
                int64_t distance = running * unit - s;
                if (distance > p->distance_cap) distance = p->distance_cap;
                const int64_t prob = exp2_of_distance(p, exp2_base, exp2_slope, distance);
                const int64_t w = round_scaled((double)prob * v_factor[t], 0.0, weight_hi, &sat[1]);
                if (shift) { /* a shift by 0 leaves l and o as they are */
                    l_acc = shift_round_half_up(l_acc, shift);
                    for (int e = 0; e < d; e++) o[e] = shift_round_half_up(o[e], shift);
                }
                l_acc += prob;
                /* w < 2**weight_bits <= 2**31: 32 x 8-bit products, which vectorize as
                   32 x 32 -> 64-bit multiplies where 64 x 64 would not */
                const int32_t w32 = (int32_t)w;
                if (wide) {
                    const int16_t *vt = (const int16_t *)v_row[t];
                    for (int e = 0; e < d; e++) o[e] += (int64_t)w32 * (int64_t)vt[e];
                } else {
                    const int8_t *vt = (const int8_t *)v_row[t];
                    for (int e = 0; e < d; e++) o[e] += (int64_t)w32 * (int64_t)vt[e];
                }
            }
            m_out[row] = running * unit;
            l_out[row] = l_acc;
            /* y = o / l: 1/m of l's mantissa, o shifted by l's exponent, one narrow product */
            const int64_t recip = reciprocal(p, seed, l_acc);
            int l_msb = leading_one(l_acc, p->recip_in_bits);
            if (l_msb < p->prob_frac_bits - 1) l_msb = p->prob_frac_bits - 1;
            const int o_shift = l_msb + p->out_o_shift_offset;
            int64_t *y = y_out + row * d;
            memcpy(o_out + row * d, o, sizeof(int64_t) * d);
            for (int e = 0; e < d; e++) {
                int64_t scaled = o[e] >> o_shift;
                int64_t operand = scaled < o_lo ? o_lo : (scaled > o_hi ? o_hi : scaled);
                int64_t value = shift_round_half_up(operand * recip, p->out_product_shift);
                int64_t clipped = value < out_lo ? out_lo : (value > out_hi ? out_hi : value);
                if (clipped != value || operand != scaled) sat[2]++;
                y[e] = clipped;
            }
        }
    }
}
