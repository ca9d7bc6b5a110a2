// HBM pseudo-channel timing for the native harness's read ports: tandem/sim/hpu/hbm.py's
// HbmModel in C++, grant for grant.
//
// Each channel is a deterministic token bucket (bytes) that fills at `fill` bytes a cycle
// outside its refresh windows, up to `cap`; once per cycle the ports with a beat waiting ask
// with the beat's address, and within a channel they are served round robin from the
// channel's pointer, each beat costing `beat_bytes` (`beat_bytes / lateral_factor` for a port
// reading outside its home channels) while the bucket holds that much. The arithmetic is the
// Python model's: doubles for the tokens, the same 1e-9 tolerance, Python's floor division
// and modulo for the refresh schedule and the round-robin order, the same lazy fill (a cycle
// nobody asks about still fills, at the next grant), so the same requests get the same beats.
//
// The harness includes this header; it has no Verilator dependency, so with
// TANDEM_HBM_STANDALONE defined it also compiles alone into a small library with a C API
// (tn_hbm_*), which tests/test_native_hbm.py compares with the Python model.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tandem {

// Python's a // b and a % b for b > 0 (C++ truncates towards zero).
inline int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}
inline int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

struct HbmParams {
    int channels = 1;
    uint64_t channel_bytes = 1;
    int beat_bytes = 1;
    double fill = 0.0;    // bytes a bucket gains per cycle outside refresh
    double cap = 0.0;     // bytes a bucket holds at most
    double start = 0.0;   // bytes a bucket holds at first and after reset()
    int64_t refresh_interval = 1, refresh_cycles = 0;
    int latency = 1;      // cycles from an address to its burst's first beat
    double lateral_factor = 1.0;
};

class Hbm {
  public:
    HbmParams p;
    std::vector<double> tokens;
    std::vector<int64_t> next_port;   // round-robin pointer per channel
    std::vector<int64_t> bytes;       // bytes served per channel
    uint64_t beats = 0;
    std::vector<std::vector<char>> homes;  // per port, per channel: a home channel
    bool started = false;             // the Python model's last_cycle is not None
    int64_t last_cycle = 0;

    explicit Hbm(const HbmParams& params)
        : p(params), tokens(params.channels, params.start), next_port(params.channels, 0),
          bytes(params.channels, 0) {}

    // Register a port with no home channel (every read lateral); returns its index.
    int add_port() {
        homes.emplace_back(p.channels, 0);
        return static_cast<int>(homes.size()) - 1;
    }

    void set_home(int port, const int* channels, int count) {
        auto& home = homes[port];
        std::fill(home.begin(), home.end(), 0);
        for (int i = 0; i < count; ++i)
            if (channels[i] >= 0 && channels[i] < p.channels) home[channels[i]] = 1;
    }

    int channel_of(uint64_t address) const {
        uint64_t c = address / p.channel_bytes;
        return c < static_cast<uint64_t>(p.channels - 1) ? static_cast<int>(c) : p.channels - 1;
    }

    int64_t offset(int channel) const {
        return static_cast<int64_t>(channel) * p.refresh_interval / p.channels;
    }

    bool refreshing(int channel, int64_t cycle) const {
        return floor_mod(cycle - offset(channel), p.refresh_interval) < p.refresh_cycles;
    }

    // Refresh cycles before t, counted from the channel's offset (may be negative).
    int64_t refreshing_before(int channel, int64_t t) const {
        int64_t span = t - offset(channel);
        int64_t full = floor_div(span, p.refresh_interval);
        int64_t part = span - full * p.refresh_interval;
        return full * p.refresh_cycles + std::min(part, p.refresh_cycles);
    }

    int64_t active_cycles(int channel, int64_t start, int64_t stop) const {
        if (stop <= start) return 0;
        return (stop - start) -
               (refreshing_before(channel, stop) - refreshing_before(channel, start));
    }

    void advance(int64_t cycle) {
        if (!started) {
            started = true;
            last_cycle = cycle - 1;
        }
        if (cycle <= last_cycle) return;
        for (int c = 0; c < p.channels; ++c) {
            // volatile: a fused multiply-add (-march=native) would round once where Python
            // rounds the product and the sum apart, and the buckets would drift from its.
            volatile double gain =
                static_cast<double>(active_cycles(c, last_cycle + 1, cycle + 1)) * p.fill;
            tokens[c] = std::min(p.cap, tokens[c] + gain);
        }
        last_cycle = cycle;
    }

    double cost(int port, int channel) const {
        const bool lateral = !homes[port][channel];
        return lateral ? p.beat_bytes / p.lateral_factor : static_cast<double>(p.beat_bytes);
    }

    // Which of the `n` beats waiting at `cycle` go out: ports[i] asks for the beat at
    // addresses[i] (one beat per port at most); out[i] = 1 when granted.
    void grant(int64_t cycle, int n, const int* ports, const uint64_t* addresses, uint8_t* out) {
        advance(cycle);
        std::fill(out, out + n, 0);
        const int64_t n_ports = std::max<int64_t>(static_cast<int64_t>(homes.size()), 1);
        std::vector<int> channel(n), waiting;
        for (int i = 0; i < n; ++i) channel[i] = channel_of(addresses[i]);
        std::vector<char> done(n, 0);
        for (int first = 0; first < n; ++first) {
            if (done[first]) continue;
            const int c = channel[first];
            waiting.clear();
            for (int i = first; i < n; ++i)
                if (channel[i] == c) {
                    waiting.push_back(i);
                    done[i] = 1;
                }
            if (refreshing(c, cycle)) continue;
            const int64_t start = next_port[c];
            std::stable_sort(waiting.begin(), waiting.end(), [&](int a, int b) {
                return floor_mod(ports[a] - start, n_ports) < floor_mod(ports[b] - start, n_ports);
            });
            for (int i : waiting) {
                const double price = cost(ports[i], c);
                if (tokens[c] + 1e-9 < price) break;
                tokens[c] -= price;
                bytes[c] += p.beat_bytes;
                ++beats;
                out[i] = 1;
                next_port[c] = (ports[i] + 1) % n_ports;
            }
        }
    }

    // Buckets back to their start, counters zero (the refresh schedule runs on).
    void reset() {
        std::fill(tokens.begin(), tokens.end(), p.start);
        clear_counters();
    }

    void clear_counters() {
        std::fill(bytes.begin(), bytes.end(), 0);
        beats = 0;
    }
};

}  // namespace tandem

#ifdef TANDEM_HBM_STANDALONE
extern "C" {

void* tn_hbm_new(int channels, uint64_t channel_bytes, int beat_bytes, double fill, double cap,
                 double start, int64_t refresh_interval, int64_t refresh_cycles, int latency,
                 double lateral_factor) {
    tandem::HbmParams p{channels, channel_bytes, beat_bytes, fill, cap, start,
                        refresh_interval, refresh_cycles, latency, lateral_factor};
    return new tandem::Hbm(p);
}

void tn_hbm_free(void* h) { delete static_cast<tandem::Hbm*>(h); }

int tn_hbm_port(void* h, const int* channels, int count) {
    auto* m = static_cast<tandem::Hbm*>(h);
    int port = m->add_port();
    m->set_home(port, channels, count);
    return port;
}

void tn_hbm_grant(void* h, int64_t cycle, int n, const int* ports, const uint64_t* addresses,
                  uint8_t* out) {
    static_cast<tandem::Hbm*>(h)->grant(cycle, n, ports, addresses, out);
}

// Bytes per channel into `out` (int64 [channels]), tokens into `tokens`; returns the beats.
uint64_t tn_hbm_state(void* h, int64_t* out, double* tokens) {
    auto* m = static_cast<tandem::Hbm*>(h);
    std::copy(m->bytes.begin(), m->bytes.end(), out);
    std::copy(m->tokens.begin(), m->tokens.end(), tokens);
    return m->beats;
}

void tn_hbm_reset(void* h) { static_cast<tandem::Hbm*>(h)->reset(); }

}  // extern "C"
#endif
