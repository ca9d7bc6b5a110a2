// Native co-simulation harness: a Verilated design stepped in C++, with its stream drivers,
// stream monitors and AXI4 device memory in C++, behind a small C API that Python calls once
// per batch of beats (tandem/sim/native/model.py), never once per clock edge.
//
// The generated binding file (tandem/sim/native/build.py writes it from the design's manifest)
// includes this header, defines `bind_ports(Harness&, Vtop*)` that registers every stream and
// AXI port of the design, and `TANDEM_TRACE` when the build records waves (FST).
//
// Timing follows the cocotb path exactly, so both report the same cycle counts:
//
// * Every clock edge samples the handshakes *before* the edge (what cocotb reads at a
//   RisingEdge), then the port models react (drive the next beat, raise ready), then the
//   device-memory processes run, then the host's wait condition is checked.
// * A stream source drives a queued beat from the edge after it was queued and keeps it until
//   a transfer; the next beat follows at once (tandem.sim.stream.StreamSource). A "command"
//   is driven at once (the stream server's _command). A stream sink raises ready one edge
//   after it is enabled (tandem.sim.stream.StreamSink).
// * Device memory is cocotbext-axi's AxiRamRead/AxiRamWrite as tandem.sim.hpu.memory uses
//   them: AR, AW and W sinks and R and B sources with queues of 2 (ready low while 2 are
//   queued), a read process that reads memory when it queues a beat, a write process that
//   writes a W beat when it takes it and queues B after the last one; reads answered
//   `latency` cycles after their address (2 = as fast as the model answers), bursts of one
//   port in order.
// * HBM mode (off unless tn_set_hbm turns it on): the read ports are served as
//   tandem.sim.hpu.memory's HbmMemory serves them, paced by the pseudo-channel model of
//   hbm.h (tandem.sim.hpu.hbm's HbmModel): AR taken at once (arready high), each burst due
//   `latency` cycles after its address and after the burst before it, then once per cycle
//   every port not presenting a beat asks with its next beat's address; a granted beat is
//   read from memory, driven and held until rready.
//
// Evaluation. Verilator's eval() runs the input-combinational logic ("ico": everything that
// depends on a top-level input, in Amaranth's Verilog most of the next-state logic) every
// time, then the logic the clock edge triggers. A cycle evaluates twice (the rising edge, then
// the falling edge to settle the inputs the port models drove), so plain eval() computes the
// ico logic twice a cycle although the inputs changed at most once. When build.py finds the
// model in the one shape it checks for (TANDEM_FAST_EVAL: ico, then active and NBA phases
// triggered by the rising edge of clk alone, no ico logic reading clk), a rising edge runs
// the active and NBA phases alone (the ico logic was settled after the last input change and
// would compute the same values), and a falling edge whose inputs are unchanged is not
// evaluated at all: nothing triggers on it, so only the trigger's memory of clk is lowered,
// as the evaluation would. Results and cycles are the same either way
// (tests/test_native_harness.py runs both); waves always take the plain path.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "Vtop.h"
#include "hbm.h"
#include "verilated.h"
#ifdef TANDEM_TRACE
#include "verilated_fst_c.h"
#endif

#ifndef TANDEM_FAST_EVAL
#define TANDEM_FAST_EVAL 0
#endif
#if TANDEM_FAST_EVAL
#include "Vtop___024root.h"
// The model's own phases (Vtop___024root__0.cpp), as its eval() calls them.
bool Vtop___024root___eval_phase__act(Vtop___024root* vlSelf);
bool Vtop___024root___eval_phase__nba(Vtop___024root* vlSelf);
#endif

namespace tandem {

using Words = std::vector<uint32_t>;
using Setter = std::function<void(const uint32_t*)>;
using Getter = std::function<void(uint32_t*)>;

inline int words_of(int width) { return (width + 31) / 32; }

// Payload accessors for each Verilator port type (CData .. QData, VlWide<N>).
template <typename T>
void put(T& port, const uint32_t* w, int width) {
    uint64_t value = w[0];
    if (width > 32) value |= static_cast<uint64_t>(w[1]) << 32;
    port = static_cast<T>(value);
}
template <std::size_t N>
void put(VlWide<N>& port, const uint32_t* w, int) {
    for (std::size_t i = 0; i < N; ++i) port[i] = w[i];
}
template <typename T>
void take(const T& port, uint32_t* w, int width) {
    uint64_t value = static_cast<uint64_t>(port);
    w[0] = static_cast<uint32_t>(value);
    if (width > 32) w[1] = static_cast<uint32_t>(value >> 32);
}
template <std::size_t N>
void take(const VlWide<N>& port, uint32_t* w, int) {
    for (std::size_t i = 0; i < N; ++i) w[i] = port[i];
}

struct Source {
    std::string name;
    int width = 0, words = 0;
    CData* valid = nullptr;
    const CData* ready = nullptr;
    Setter set;
    std::vector<uint32_t> queue;  // beats back to back, `words` each
    size_t head = 0;              // first beat not yet taken by the design (in words)
    bool driving = false, fire = false;
    uint64_t transfers = 0, last_transfer = 0;
    uint64_t pending() const { return (queue.size() - head) / words; }
    const uint32_t* front() const { return queue.data() + head; }
    void pop() {
        head += words;
        if (head == queue.size()) clear();
    }
    void clear() {
        queue.clear();
        head = 0;
    }
};

struct Sink {
    std::string name;
    int width = 0, words = 0;
    const CData* valid = nullptr;
    CData* ready = nullptr;
    Getter get;
    std::vector<uint32_t> received;  // beats back to back, `words` each
    size_t head = 0;                 // first beat not yet taken by the host (in words)
    bool enabled = false, ready_driven = false, fire = false;
    Words sample;
    uint64_t count() const { return (received.size() - head) / words; }
};

// One AXI4 read port of the design (a manager) served from the shared memory.
struct AxiRead {
    std::string name;
    int beat_bytes = 0;
    std::function<uint64_t()> araddr;
    const CData *arlen = nullptr, *arsize = nullptr, *arburst = nullptr, *arid = nullptr;
    const CData* arvalid = nullptr;
    CData* arready = nullptr;
    Setter rdata;
    CData *rresp = nullptr, *rlast = nullptr, *rid = nullptr, *rvalid = nullptr;
    const CData* rready = nullptr;

    struct Burst { uint64_t address; int beats; uint64_t release; };
    struct Beat { Words data; bool last; };
    std::deque<Burst> held;      // addresses waiting for their latency
    std::deque<Burst> released;  // addresses the read process has not started
    bool busy = false;           // the read process is in a burst
    Burst current{};
    int next_beat = 0;
    std::deque<Beat> r_queue;    // the R source's queue (limit 2)
    bool r_driving = false;
    uint64_t last_release = 0;
    // monitor
    bool ar_fire = false, r_fire = false, r_fire_last = false;
    uint64_t ar_count = 0, r_bursts_done = 0, r_beats = 0;
    std::vector<uint64_t> records;  // (cycle, address, beats) of every AR since the last clear
    uint64_t first_ar = 0, last_r = 0;
    uint64_t ar_sample_addr = 0;
    int ar_sample_beats = 0, ar_sample_size = 0, ar_sample_burst = 0, ar_sample_id = 0;
    // HBM mode: bursts taken and not yet delivered (the front one's next beat first).
    struct HbmBurst { uint64_t address; int beats; uint64_t due; };
    std::deque<HbmBurst> hbm_bursts;
};

// The AXI4 write port: AW, W sinks, B source and the write process.
struct AxiWrite {
    std::string name;
    int beat_bytes = 0;
    std::function<uint64_t()> awaddr;
    const CData *awlen = nullptr, *awsize = nullptr, *awburst = nullptr, *awid = nullptr;
    const CData* awvalid = nullptr;
    CData* awready = nullptr;
    Getter wdata;
    std::function<uint64_t()> wstrb;
    const CData *wlast = nullptr, *wvalid = nullptr;
    CData* wready = nullptr;
    CData *bid = nullptr, *bresp = nullptr, *bvalid = nullptr;
    const CData* bready = nullptr;

    struct Address { uint64_t address; int beats; };
    struct Data { Words data; uint64_t strobe; bool last; };
    std::deque<Address> aw_queue;
    std::deque<Data> w_queue;
    int b_queue = 0;
    bool aw_ready = false, w_ready = false, b_driving = false;
    // write process
    bool in_burst = false, b_pending = false;
    Address current{};
    int beat = 0;
    // monitor
    bool aw_fire = false, w_fire = false, b_fire = false;
    uint64_t aw_count = 0, b_count = 0;
    std::vector<uint64_t> records;  // (cycle, address, beats) of every AW since the last clear
    Address aw_sample{};
    Data w_sample{};
    int aw_sample_size = 0, aw_sample_burst = 0;
};

class Harness {
  public:
    std::unique_ptr<VerilatedContext> context;
    std::unique_ptr<Vtop> top;
    std::vector<Source> sources;
    std::vector<Sink> sinks;
    std::vector<AxiRead> reads;
    std::vector<AxiWrite> writes;
    std::vector<uint8_t> memory;
    std::vector<std::string> errors;
    uint64_t cycle = 0;
    uint64_t read_extra = 0;  // read latency beyond the model's own 2 cycles
    bool memory_held = true;  // AXI models idle until the first reset is over
    std::unique_ptr<Hbm> hbm;  // HBM mode when set (tn_set_hbm); read port i is its port i
    uint64_t hbm_latency = 1;  // HBM mode: cycles from an address to its first beat
    std::vector<int> hbm_ports;  // scratch of react_hbm: who asks, for which address
    std::vector<uint64_t> hbm_addresses;
    std::vector<uint8_t> hbm_granted;
    bool fast = TANDEM_FAST_EVAL;  // see "Evaluation" above
    // Every top-level input but clk (bind_ports) and their values at the last evaluation.
    std::vector<std::pair<uint8_t*, size_t>> inputs;
    std::vector<uint8_t> settled;
#ifdef TANDEM_TRACE
    std::unique_ptr<VerilatedFstC> trace;
#endif
    uint64_t time_ps = 0;

    explicit Harness(uint64_t memory_bytes) : memory(memory_bytes, 0) {
        context = std::make_unique<VerilatedContext>();
        top = std::make_unique<Vtop>(context.get(), "top");
    }

    void open_trace(const char* path) {
#ifdef TANDEM_TRACE
        context->traceEverOn(true);
        trace = std::make_unique<VerilatedFstC>();
        fast = false;
        top->trace(trace.get(), 99);
        trace->open(path);
#else
        (void)path;
#endif
    }

    ~Harness() {
#ifdef TANDEM_TRACE
        if (trace) trace->close();
#endif
        top->final();
    }

    bool trace_open() const {
#ifdef TANDEM_TRACE
        return static_cast<bool>(trace);
#else
        return false;
#endif
    }

    void dump() {
#ifdef TANDEM_TRACE
        if (trace) trace->dump(time_ps);
#endif
    }

    // --- the clock ---------------------------------------------------------------------
    bool dirty = true;  // the host drove inputs since the last evaluation

    void tick() {
        if (dirty) {  // a command beat, a reset: settle before sampling
            evaluate();
            dirty = false;
        }
        dump();
        time_ps += 5000;
        sample();
        top->clk = 1;
        rise();
        ++cycle;
        dump();
        time_ps += 5000;
        react();
        top->clk = 0;
        fall();
    }

    void evaluate() {
        top->eval();
        uint8_t* out = settled.data();
        for (const auto& [bytes, size] : inputs) {
            std::memcpy(out, bytes, size);
            out += size;
        }
    }

    bool inputs_changed() const {
        const uint8_t* last = settled.data();
        for (const auto& [bytes, size] : inputs) {
            if (std::memcmp(last, bytes, size) != 0) return true;
            last += size;
        }
        return false;
    }

    void rise() {
#if TANDEM_FAST_EVAL
        if (fast) {
            Vtop___024root* root = top->rootp;
            do {
                while (Vtop___024root___eval_phase__act(root)) {
                }
            } while (Vtop___024root___eval_phase__nba(root));
            return;
        }
#endif
        top->eval();
    }

    void fall() {
#if TANDEM_FAST_EVAL
        if (fast && !inputs_changed()) {
            top->rootp->__Vtrigprevexpr___TOP__clk__0 = 0;
            return;
        }
#endif
        evaluate();
    }

    void sample() {
        for (auto& s : sources) s.fire = s.driving && *s.ready;
        for (auto& s : sinks) {
            s.fire = s.ready_driven && *s.valid;
            if (s.fire) s.get(s.sample.data());
        }
        for (auto& a : reads) {
            a.ar_fire = *a.arvalid && *a.arready;
            if (a.ar_fire) {
                a.ar_sample_addr = a.araddr();
                a.ar_sample_beats = *a.arlen + 1;
                a.ar_sample_size = *a.arsize;
                a.ar_sample_burst = *a.arburst;
                a.ar_sample_id = a.arid ? *a.arid : 0;
            }
            a.r_fire = a.r_driving && *a.rready;
            a.r_fire_last = a.r_fire && *a.rlast;
        }
        for (auto& a : writes) {
            a.aw_fire = *a.awvalid && a.aw_ready;
            if (a.aw_fire) {
                a.aw_sample = {a.awaddr(), *a.awlen + 1};
                a.aw_sample_size = *a.awsize;
                a.aw_sample_burst = *a.awburst;
            }
            a.w_fire = *a.wvalid && a.w_ready;
            if (a.w_fire) {
                a.w_sample.data.assign(a.beat_bytes / 4, 0);
                a.wdata(a.w_sample.data.data());
                a.w_sample.strobe = a.wstrb();
                a.w_sample.last = *a.wlast;
            }
            a.b_fire = a.b_driving && *a.bready;
        }
    }

    void react() {
        const bool in_reset = top->rst;
        for (auto& s : sources) {
            if (in_reset) {
                s.driving = false;
                *s.valid = 0;
                continue;
            }
            if (s.fire) {
                s.pop();
                ++s.transfers;
                s.last_transfer = cycle;
                s.driving = false;
            }
            if (!s.driving) {
                if (s.pending()) {
                    s.set(s.front());
                    *s.valid = 1;
                    s.driving = true;
                } else {
                    *s.valid = 0;
                }
            }
        }
        for (auto& s : sinks) {
            if (in_reset || !s.enabled) {
                *s.ready = 0;
                s.ready_driven = false;
                continue;
            }
            if (s.fire) s.received.insert(s.received.end(), s.sample.begin(), s.sample.end());
            s.ready_driven = true;
            *s.ready = 1;
        }
        if (in_reset || memory_held) {
            for (auto& a : reads) reset_read(a);
            for (auto& a : writes) reset_write(a);
            return;
        }
        if (hbm)
            react_hbm();
        else
            for (auto& a : reads) react_read(a);
        for (auto& a : writes) react_write(a);
    }

    // --- device memory -----------------------------------------------------------------
    void reset_read(AxiRead& a) {
        a.held.clear();
        a.released.clear();
        a.r_queue.clear();
        a.busy = false;
        a.r_driving = false;
        a.last_release = 0;
        a.hbm_bursts.clear();
        *a.arready = 0;
        *a.rvalid = 0;
    }

    void reset_write(AxiWrite& a) {
        a.aw_queue.clear();
        a.w_queue.clear();
        a.b_queue = 0;
        a.in_burst = a.b_pending = a.b_driving = false;
        a.aw_ready = a.w_ready = false;
        *a.awready = 0;
        *a.wready = 0;
        *a.bvalid = 0;
    }

    void check_burst(const std::string& where, uint64_t address, int beats, int size,
                     int burst, int beat_bytes) {
        const int size_code = __builtin_ctz(beat_bytes);
        const uint64_t end = address + static_cast<uint64_t>(beats) * beat_bytes;
        const bool bad_size = size != size_code, bad_burst = burst != 1;
        const bool unaligned = address % beat_bytes, crosses = address / 4096 != (end - 1) / 4096;
        const bool beyond = end > memory.size();
        if (!(bad_size || bad_burst || unaligned || crosses || beyond)) return;
        std::string at = where + " at cycle " + std::to_string(cycle) + " (address " +
                         std::to_string(address) + ", " + std::to_string(beats) + " beats)";
        if (bad_size) errors.push_back(at + ": size " + std::to_string(size));
        if (bad_burst) errors.push_back(at + ": burst " + std::to_string(burst) + ", not INCR");
        if (unaligned) errors.push_back(at + ": address not aligned to the beat");
        if (crosses) errors.push_back(at + ": crosses 4 KiB");
        if (beyond) errors.push_back(at + ": beyond the memory");
    }

    // The AR monitor: record and check the address taken at this edge.
    void record_ar(AxiRead& a) {
        if (a.records.empty()) a.first_ar = cycle;
        a.records.insert(a.records.end(),
                         {cycle, a.ar_sample_addr, static_cast<uint64_t>(a.ar_sample_beats)});
        ++a.ar_count;
        check_burst(a.name + " AR", a.ar_sample_addr, a.ar_sample_beats, a.ar_sample_size,
                    a.ar_sample_burst, a.beat_bytes);
        if (a.ar_sample_id != 0) errors.push_back(a.name + " AR: id not 0");
    }

    // HBM mode: every read port in one pass, as HbmMemory._run serves them (sample each
    // port's handshakes and collect who asks, one grant, then drive).
    void react_hbm() {
        hbm_ports.clear();
        hbm_addresses.clear();
        for (size_t i = 0; i < reads.size(); ++i) {
            AxiRead& a = reads[i];
            if (a.r_fire) {
                ++a.r_beats;
                a.last_r = cycle;
                if (a.r_fire_last) ++a.r_bursts_done;
                AxiRead::HbmBurst& burst = a.hbm_bursts.front();
                burst.address += a.beat_bytes;
                if (--burst.beats == 0) a.hbm_bursts.pop_front();
                a.r_driving = false;
            }
            if (a.ar_fire) {
                record_ar(a);
                // Same ID: data returns in address order, so a burst waits for the one before.
                uint64_t due = cycle + std::max<uint64_t>(1, hbm_latency) - 1;
                if (!a.hbm_bursts.empty()) due = std::max(due, a.hbm_bursts.back().due);
                a.hbm_bursts.push_back({a.ar_sample_addr, a.ar_sample_beats, due});
            }
            if (!a.r_driving && !a.hbm_bursts.empty() && a.hbm_bursts.front().due <= cycle) {
                hbm_ports.push_back(static_cast<int>(i));
                hbm_addresses.push_back(a.hbm_bursts.front().address);
            }
        }
        const int n = static_cast<int>(hbm_ports.size());
        hbm_granted.assign(n, 0);
        if (n)  // as HbmMemory: a cycle nobody asks in is not a grant (the buckets fill later)
            hbm->grant(static_cast<int64_t>(cycle), n, hbm_ports.data(), hbm_addresses.data(),
                       hbm_granted.data());
        int asked = 0;
        for (size_t i = 0; i < reads.size(); ++i) {
            AxiRead& a = reads[i];
            const bool granted =
                asked < n && hbm_ports[asked] == static_cast<int>(i) && hbm_granted[asked++];
            if (granted) {
                const AxiRead::HbmBurst& burst = a.hbm_bursts.front();
                Words data(a.beat_bytes / 4, 0);
                if (burst.address + a.beat_bytes <= memory.size())
                    std::memcpy(data.data(), memory.data() + burst.address, a.beat_bytes);
                a.rdata(data.data());
                *a.rlast = burst.beats == 1;
                *a.rresp = 0;
                if (a.rid) *a.rid = 0;
                *a.rvalid = 1;
                a.r_driving = true;
            } else if (!a.r_driving) {
                *a.rvalid = 0;
            }
            *a.arready = 1;
        }
    }

    void react_read(AxiRead& a) {
        // R monitor and source: the beat driven is taken, then the next queued one is driven.
        if (a.r_fire) {
            ++a.r_beats;
            a.last_r = cycle;
            if (a.r_fire_last) ++a.r_bursts_done;
        }
        if (a.r_fire || !a.r_driving) {
            if (!a.r_queue.empty()) {
                AxiRead::Beat& beat = a.r_queue.front();
                a.rdata(beat.data.data());
                *a.rlast = beat.last;
                *a.rresp = 0;
                if (a.rid) *a.rid = 0;
                *a.rvalid = 1;
                a.r_driving = true;
                a.r_queue.pop_front();
            } else {
                *a.rvalid = 0;
                a.r_driving = false;
            }
        }
        // AR sink: never more than one address queued (the latency line takes it at once).
        if (a.ar_fire) {
            record_ar(a);
            uint64_t release = std::max(a.last_release, cycle + read_extra);
            a.last_release = release;
            a.held.push_back({a.ar_sample_addr, a.ar_sample_beats, release});
        }
        *a.arready = 1;
        while (!a.held.empty() && a.held.front().release <= cycle) {
            a.released.push_back(a.held.front());
            a.held.pop_front();
        }
        // The read process: bursts in order, at most 2 beats queued on R.
        for (;;) {
            if (!a.busy) {
                if (a.released.empty()) break;
                a.current = a.released.front();
                a.released.pop_front();
                a.busy = true;
                a.next_beat = 0;
            }
            if (a.r_queue.size() >= 2) break;
            uint64_t address = a.current.address + static_cast<uint64_t>(a.next_beat) *
                                                       a.beat_bytes;
            AxiRead::Beat beat{Words(a.beat_bytes / 4, 0), a.next_beat == a.current.beats - 1};
            if (address + a.beat_bytes <= memory.size())
                std::memcpy(beat.data.data(), memory.data() + address, a.beat_bytes);
            a.r_queue.push_back(std::move(beat));
            if (++a.next_beat == a.current.beats) a.busy = false;
        }
    }

    void react_write(AxiWrite& a) {
        if (a.b_fire) ++a.b_count;
        if (a.b_fire || !a.b_driving) {
            if (a.b_queue > 0) {
                --a.b_queue;
                *a.bvalid = 1;
                *a.bresp = 0;
                if (a.bid) *a.bid = 0;
                a.b_driving = true;
            } else {
                *a.bvalid = 0;
                a.b_driving = false;
            }
        }
        if (a.aw_fire) {
            a.records.insert(a.records.end(), {cycle, a.aw_sample.address,
                                               static_cast<uint64_t>(a.aw_sample.beats)});
            ++a.aw_count;
            check_burst(a.name + " AW", a.aw_sample.address, a.aw_sample.beats,
                        a.aw_sample_size, a.aw_sample_burst, a.beat_bytes);
            a.aw_queue.push_back(a.aw_sample);
        }
        if (a.w_fire) a.w_queue.push_back(a.w_sample);
        a.aw_ready = a.aw_queue.size() < 2;
        a.w_ready = a.w_queue.size() < 2;
        *a.awready = a.aw_ready;
        *a.wready = a.w_ready;
        // The write process: an address, its beats, then the response (B queue of 2).
        for (;;) {
            if (a.b_pending) {
                if (a.b_queue >= 2) break;
                ++a.b_queue;
                a.b_pending = false;
            }
            if (!a.in_burst) {
                if (a.aw_queue.empty()) break;
                a.current = a.aw_queue.front();
                a.aw_queue.pop_front();
                a.in_burst = true;
                a.beat = 0;
            }
            if (a.w_queue.empty()) break;
            AxiWrite::Data data = std::move(a.w_queue.front());
            a.w_queue.pop_front();
            uint64_t address = a.current.address + static_cast<uint64_t>(a.beat) * a.beat_bytes;
            const auto* bytes = reinterpret_cast<const uint8_t*>(data.data.data());
            for (int i = 0; i < a.beat_bytes; ++i)
                if ((data.strobe >> i) & 1 && address + i < memory.size())
                    memory[address + i] = bytes[i];
            if (data.last != (a.beat == a.current.beats - 1))
                errors.push_back(a.name + " W at cycle " + std::to_string(cycle) +
                                 ": wlast does not end the burst");
            if (++a.beat == a.current.beats) {
                a.in_burst = false;
                a.b_pending = true;
            }
        }
    }

    bool memory_idle() const {
        for (const auto& a : reads)
            if (a.ar_count != a.r_bursts_done) return false;
        for (const auto& a : writes)
            if (a.aw_count != a.b_count) return false;
        return true;
    }

    void reset(int cycles) {
        for (auto& s : sources) {
            s.clear();
            s.driving = false;
            *s.valid = 0;
        }
        top->rst = 1;
        dirty = true;
        for (int i = 0; i < cycles; ++i) tick();
        top->rst = 0;
        dirty = true;
        for (auto& s : sinks) {
            s.received.clear();
            s.head = 0;
        }
        tick();
    }
};

}  // namespace tandem

void bind_ports(tandem::Harness& h, Vtop* top);

// --- the C API (ctypes) ------------------------------------------------------------------
extern "C" {

void* tn_new(uint64_t memory_bytes, const char* trace_path) {
    auto* h = new tandem::Harness(memory_bytes);
    bind_ports(*h, h->top.get());
    for (auto& s : h->sinks) s.sample.assign(s.words, 0);
    size_t input_bytes = 0;
    for (const auto& input : h->inputs) input_bytes += input.second;
    h->settled.assign(input_bytes, 0);
    if (trace_path && *trace_path) h->open_trace(trace_path);
    h->top->clk = 0;
    h->top->rst = 0;
    h->evaluate();
    return h;
}

void tn_free(void* p) { delete static_cast<tandem::Harness*>(p); }

// Use the fast evaluation (see "Evaluation") or not; returns whether it is on. A build whose
// model was not in the checked shape, or one recording waves, has only the plain path.
int tn_fast_eval(void* p, int on) {
    auto* h = static_cast<tandem::Harness*>(p);
    h->fast = on && TANDEM_FAST_EVAL && !h->trace_open();
    return h->fast;
}

int tn_traced() {
#ifdef TANDEM_TRACE
    return 1;
#else
    return 0;
#endif
}

int tn_source(void* p, const char* name) {
    auto* h = static_cast<tandem::Harness*>(p);
    for (size_t i = 0; i < h->sources.size(); ++i)
        if (h->sources[i].name == name) return static_cast<int>(i);
    return -1;
}

int tn_sink(void* p, const char* name) {
    auto* h = static_cast<tandem::Harness*>(p);
    for (size_t i = 0; i < h->sinks.size(); ++i)
        if (h->sinks[i].name == name) return static_cast<int>(i);
    return -1;
}

uint64_t tn_cycle(void* p) { return static_cast<tandem::Harness*>(p)->cycle; }

// Read latency of every read port; in HBM mode it replaces the HBM latency (below 1: 1), as
// the cocotb memory's set_read_latency does on ports an HbmMemory serves.
void tn_set_read_latency(void* p, uint64_t latency) {
    auto* h = static_cast<tandem::Harness*>(p);
    h->read_extra = latency > 2 ? latency - 2 : 0;
    h->hbm_latency = latency;
}

// Number of AXI read ports (the first tn_axi_* indices).
int tn_read_ports(void* p) {
    return static_cast<int>(static_cast<tandem::Harness*>(p)->reads.size());
}

// HBM mode on (see "HBM mode" above and hbm.h), every read port registered with no home
// channel (tn_set_port_home gives it its own); channels start with `start` bytes, the
// burst's first beat waits `latency` cycles. Returns 0, or -1 when a read port's beat is not
// `beat_bytes` (the mode stays off).
int tn_set_hbm(void* p, int channels, uint64_t channel_bytes, int beat_bytes, double fill,
               double cap, double start, int64_t refresh_interval, int64_t refresh_cycles,
               int latency, double lateral_factor) {
    auto* h = static_cast<tandem::Harness*>(p);
    for (const auto& a : h->reads)
        if (a.beat_bytes != beat_bytes) return -1;
    tandem::HbmParams params{channels, channel_bytes, beat_bytes, fill, cap, start,
                             refresh_interval, refresh_cycles, latency, lateral_factor};
    h->hbm = std::make_unique<tandem::Hbm>(params);
    for (size_t i = 0; i < h->reads.size(); ++i) h->hbm->add_port();
    h->hbm_latency = static_cast<uint64_t>(latency);
    return 0;
}

// Home channels of read port `port` in HBM mode (reading any other pays the lateral cost).
void tn_set_port_home(void* p, int port, const int* channels, int count) {
    auto* h = static_cast<tandem::Harness*>(p);
    if (h->hbm) h->hbm->set_home(port, channels, count);
}

// Bytes each channel served since the HBM mode was set or the last clear into `out` (int64
// [channels]); returns the beats served, 0 with HBM mode off.
uint64_t tn_hbm_channel_bytes(void* p, int64_t* out) {
    auto* h = static_cast<tandem::Harness*>(p);
    if (!h->hbm) return 0;
    std::copy(h->hbm->bytes.begin(), h->hbm->bytes.end(), out);
    return h->hbm->beats;
}

void tn_hbm_clear_counters(void* p) {
    auto* h = static_cast<tandem::Harness*>(p);
    if (h->hbm) h->hbm->clear_counters();
}

void tn_hold_memory(void* p, int held) { static_cast<tandem::Harness*>(p)->memory_held = held; }

void tn_reset(void* p, int cycles) { static_cast<tandem::Harness*>(p)->reset(cycles); }

void tn_run(void* p, uint64_t cycles) {
    auto* h = static_cast<tandem::Harness*>(p);
    for (uint64_t i = 0; i < cycles; ++i) h->tick();
}

// Queue `count` beats (words_of(width) words each) on input stream `port`.
void tn_send(void* p, int port, const uint32_t* words, uint64_t count) {
    auto& s = static_cast<tandem::Harness*>(p)->sources[port];
    if (s.head) {  // drop the beats already taken
        s.queue.erase(s.queue.begin(), s.queue.begin() + s.head);
        s.head = 0;
    }
    s.queue.insert(s.queue.end(), words, words + count * s.words);
}

// Offer one beat now (before the next edge), ahead of anything queued.
void tn_command(void* p, int port, const uint32_t* words) {
    auto& s = static_cast<tandem::Harness*>(p)->sources[port];
    if (s.head >= static_cast<size_t>(s.words))
        s.head -= s.words;
    else
        s.queue.insert(s.queue.begin() + s.head, s.words, 0);
    std::memcpy(s.queue.data() + s.head, words, s.words * sizeof(uint32_t));
    s.set(s.front());
    *s.valid = 1;
    s.driving = true;
    static_cast<tandem::Harness*>(p)->dirty = true;
}

uint64_t tn_pending(void* p, int port) {
    return static_cast<tandem::Harness*>(p)->sources[port].pending();
}

uint64_t tn_last_transfer(void* p, int port) {
    return static_cast<tandem::Harness*>(p)->sources[port].last_transfer;
}

void tn_enable_sink(void* p, int port) {
    static_cast<tandem::Harness*>(p)->sinks[port].enabled = true;
}

uint64_t tn_received(void* p, int port) {
    return static_cast<tandem::Harness*>(p)->sinks[port].count();
}

// Move up to `count` received beats of output stream `port` into `out`; returns how many.
uint64_t tn_take(void* p, int port, uint32_t* out, uint64_t count) {
    auto& s = static_cast<tandem::Harness*>(p)->sinks[port];
    uint64_t n = std::min<uint64_t>(count, s.count());
    std::memcpy(out, s.received.data() + s.head, n * s.words * sizeof(uint32_t));
    s.head += n * s.words;
    if (s.head == s.received.size()) {
        s.received.clear();
        s.head = 0;
    }
    return n;
}

// Step until input stream `port` has sent everything queued; 0 when done, 1 past `deadline`.
int tn_until_sent(void* p, int port, uint64_t deadline) {
    auto* h = static_cast<tandem::Harness*>(p);
    auto& s = h->sources[port];
    while (s.pending()) {
        if (h->cycle >= deadline) return 1;
        h->tick();
    }
    return 0;
}

// Step until output stream `port` holds `count` beats; 0 when it does, 1 past `deadline`.
int tn_until_received(void* p, int port, uint64_t count, uint64_t deadline) {
    auto* h = static_cast<tandem::Harness*>(p);
    auto& s = h->sinks[port];
    while (s.count() < count) {
        if (h->cycle >= deadline) return 1;
        h->tick();
    }
    return 0;
}

// Step until output stream `port` has delivered `count` beats with payload bit `bit` set
// (a `last` flag), counting from the beats not yet taken; 0 done, 1 past `deadline`.
int tn_until_marked(void* p, int port, int bit, uint64_t count, uint64_t deadline) {
    auto* h = static_cast<tandem::Harness*>(p);
    auto& s = h->sinks[port];
    uint64_t seen = 0, scanned = s.head;
    for (;;) {
        for (; scanned < s.received.size(); scanned += s.words)
            if ((s.received[scanned + bit / 32] >> (bit % 32)) & 1) ++seen;
        if (seen >= count) return 0;
        if (h->cycle >= deadline) return 1;
        h->tick();
    }
}

int tn_until_memory_idle(void* p, uint64_t deadline) {
    auto* h = static_cast<tandem::Harness*>(p);
    while (!h->memory_idle()) {
        if (h->cycle >= deadline) return 1;
        h->tick();
    }
    return 0;
}

// Number of AXI ports: read ports first, then write ports (the order of tn_axi_* indices).
int tn_axi_ports(void* p) {
    auto* h = static_cast<tandem::Harness*>(p);
    return static_cast<int>(h->reads.size() + h->writes.size());
}

const char* tn_axi_name(void* p, int port) {
    auto* h = static_cast<tandem::Harness*>(p);
    if (port < static_cast<int>(h->reads.size())) return h->reads[port].name.c_str();
    return h->writes[port - h->reads.size()].name.c_str();
}

// Records of AXI port `port` since the last clear: (cycle, address, beats) of each address
// handshake into `out` (at most `count` triples); returns how many there are in all.
// `stats` gets the R beats taken, the cycle of the first address and of the last R beat.
uint64_t tn_axi_records(void* p, int port, uint64_t* out, uint64_t count, uint64_t* stats) {
    auto* h = static_cast<tandem::Harness*>(p);
    const std::vector<uint64_t>* records;
    if (port < static_cast<int>(h->reads.size())) {
        auto& a = h->reads[port];
        records = &a.records;
        stats[0] = a.r_beats;
        stats[1] = a.first_ar;
        stats[2] = a.last_r;
    } else {
        records = &h->writes[port - h->reads.size()].records;
        stats[0] = stats[1] = stats[2] = 0;
    }
    uint64_t n = records->size() / 3;
    std::memcpy(out, records->data(), std::min(n, count) * 3 * sizeof(uint64_t));
    return n;
}

void tn_clear_records(void* p) {
    auto* h = static_cast<tandem::Harness*>(p);
    for (auto& a : h->reads) {
        a.records.clear();
        a.r_beats = a.first_ar = a.last_r = 0;
    }
    for (auto& a : h->writes) a.records.clear();
}

uint8_t* tn_memory(void* p) { return static_cast<tandem::Harness*>(p)->memory.data(); }

uint64_t tn_memory_size(void* p) { return static_cast<tandem::Harness*>(p)->memory.size(); }

// Protocol errors since the last call, joined by "; " into `out` (truncated to `size`);
// returns how many there were and forgets them.
int tn_errors(void* p, char* out, int size) {
    auto* h = static_cast<tandem::Harness*>(p);
    std::string text;
    for (const auto& e : h->errors) text += (text.empty() ? "" : "; ") + e;
    int n = static_cast<int>(h->errors.size());
    h->errors.clear();
    if (size > 0) {
        std::strncpy(out, text.c_str(), size - 1);
        out[size - 1] = 0;
    }
    return n;
}

void tn_flush(void* p) {
#ifdef TANDEM_TRACE
    auto* h = static_cast<tandem::Harness*>(p);
    if (h->trace) h->trace->flush();
#else
    (void)p;
#endif
}

}  // extern "C"
