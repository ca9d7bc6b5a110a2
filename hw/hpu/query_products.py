"""``hpu`` K side's query operands: the query memories :class:`~.k_side.QueryDot` reads a
chunk of every query from (KA), and the products of each query's chunk with a K row beat (KB,
and KM where two int8 queries share a DSP48E2)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib.memory import Memory
from amaranth.utils import exact_log2

from .arith import registered

__all__ = ["PACK_SHIFT", "packs_queries", "query_memories", "query_products"]


#: Where the second query's product sits in a packed DSP48E2 product (:func:`query_products`):
#: above the first's 16 bits (an int8 x int8 product lies in [-2**14, 2**14]).
PACK_SHIFT = 16


def packs_queries(p) -> bool:
    """Do two queries share a DSP48E2 (int8 queries against int8 K)?"""
    return p.q_bits == 8 and p.kv_bits == 8


def query_products(p, m, chunks, data_):
    """KB: ``lanes`` products of each query's chunk (``chunks[g]``) with the K beat
    (``data_``), registered, per query; with packed queries, KM after it.

    With int8 queries and int8 K, each K element is shared by the queries, so two queries
    share a multiplier (one DSP48E2, 24 of the A port's 27 bits): ``P = (q1 * 2**16 + q0) * k
    + 2**15 = q1 k * 2**16 + (q0 k + 2**15)``. The bias keeps the low field in [0, 2**16), so
    ``P``'s bits 16 and up are ``q1 k`` exactly (no borrow to add back: added to the sums, the
    borrows made the K side's adders its longest path), and ``q0 k`` is the low field with its
    top bit flipped. A is wires: it holds ``q0``'s bits as unsigned (``q0 + 256`` where ``q0``
    is negative; an adder in front of A made it QueryDot's longest path), and the addend
    takes ``256 k`` off again with the bias. yosys leaves a DSP48E2's post-adder unused and
    puts the addend in the fabric after the multiplier, so KB registers the product and the
    addend, and KM adds them: both a cycle later.
    A last odd query has a multiplier of its own, and a register in KM.
    """
    groups, lanes, e = p.gqa_group, p.lanes, p.kv_bits

    def query(g, i):
        return chunks[g][i * p.q_bits : (i + 1) * p.q_bits].as_signed()

    def key(i):
        return data_[i * e : (i + 1) * e].as_signed()

    pack = packs_queries(p)
    products = []
    g = 0
    while g < groups:
        if pack and g + 1 < groups:
            low, high = [], []
            bias = 1 << (PACK_SHIFT - 1)
            q_bits = p.q_bits
            # pair (PACK_SHIFT + q_bits) x k (e) plus the addend: 2 bits to spare.
            width = PACK_SHIFT + q_bits + e + 2
            for i in range(lanes):
                q0, q1 = query(g, i), query(g + 1, i)
                pair = Cat(q0.as_unsigned(), Const(0, PACK_SHIFT - q_bits), q1).as_signed()
                product = registered(m, f"kb_pair{g}_{g + 1}_{i}", pair * key(i))
                # A holds q0 + 2**q_bits where q0 < 0: take 2**q_bits * k off here.
                addend = registered(
                    m, f"kb_addend{g}_{g + 1}_{i}", Mux(q0[-1], bias - (key(i) << q_bits), bias)
                )
                packed = Signal(signed(width), name=f"km_packed{g}_{g + 1}_{i}")
                m.d.sync += packed.eq(product + addend)
                low.append(Cat(packed[: PACK_SHIFT - 1], ~packed[PACK_SHIFT - 1]).as_signed())
                high.append(packed[PACK_SHIFT : 2 * PACK_SHIFT].as_signed())
            products += [low, high]
            g += 2
            continue
        row = []
        for i in range(lanes):
            product = registered(m, f"kb_product{g}_{i}", query(g, i) * key(i))
            row.append(registered(m, f"km_product{g}_{i}", product) if pack else product)
        products.append(row)
        g += 1
    return products


def query_memories(p, m: Module, query_w, slot, chunk, take) -> list:
    """One memory per query: every slot's query, written beat by beat from ``query_w``; returns
    each query's chunk ``chunk`` (``lanes`` elements) of slot ``slot``, read on ``take`` into
    the read port's register (LUTRAM and its output register: KA). An entry is a chunk,
    written a descriptor beat at a time where a chunk spans beats (int16 queries against
    int8 K), or a beat holding several chunks (int8 against int16: the register holds the
    beat, and the chunk is picked after it). Slots are 4 apart in the address, so it is
    ``Cat(entry, slot)``."""
    beat_bits, chunk_bits = p.mem_data_bits, p.lanes * p.q_bits
    entry_bits = max(beat_bits, chunk_bits)
    beats_per_entry = entry_bits // beat_bits
    chunks_per_entry = entry_bits // chunk_bits
    entries = p.q_beats // beats_per_entry  # per query and slot, a power of two
    index_bits = exact_log2(entries)
    offset = exact_log2(chunks_per_entry)
    a_offset = registered(m, "ka_chunk_offset", chunk[:offset], take)
    write = query_w.payload
    chunks = []
    for g in range(p.gqa_group):
        memory = Memory(shape=unsigned(entry_bits), depth=4 * entries, init=[])
        m.submodules[f"queries{g}"] = memory
        port = memory.write_port(granularity=beat_bits)
        beat = Signal(range(p.q_beats), name=f"q_write_beat{g}")
        mine = (write.beat >= g * p.q_beats) & (write.beat < (g + 1) * p.q_beats)
        granule = beat[: exact_log2(beats_per_entry)]
        m.d.comb += [
            beat.eq(write.beat - g * p.q_beats),
            port.addr.eq(Cat(beat[exact_log2(beats_per_entry) :][:index_bits], write.slot)),
            port.data.eq(write.data.replicate(beats_per_entry)),
            port.en.eq(Mux(query_w.valid & mine, Const(1, beats_per_entry) << granule, 0)),
        ]
        read = memory.read_port(transparent_for=())
        m.d.comb += [read.addr.eq(Cat(chunk[offset:][:index_bits], slot)), read.en.eq(take)]
        chunks.append(read.data.word_select(a_offset, chunk_bits) if offset else read.data)
    return chunks
