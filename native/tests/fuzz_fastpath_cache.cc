// The L2 value decoder (codec.h) under fuzzing, with AddressSanitizer and UndefinedBehaviorSanitizer.
//
// Each input is decoded three times: as a whole Redis value (read under a fixed key, no secret); as
// one serialized response inside an intact, key-bound and authenticated value (so the response
// parser itself is fuzzed past the framing and MAC that random values rarely get through); and as
// the choices of a structured builder that writes a response whose every length field is either
// right or off by a chosen amount, with bytes added where a field says they are not (random
// mutations rarely change a length and the bytes it counts together, and only such inputs get past
// one check to reach the next). For every accepted value the invariants are checked, and a
// violation aborts like a crash:
// - core's own reading of it (core_deserialize.h, a faithful copy of Triton 2.51's
//   DeserializeBuffers / DeserializeResponseOutput, on an exactly-sized heap copy so that
//   AddressSanitizer sees any read past its end) succeeds;
// - the decoder accepts only exact encodings: the value re-encodes to the same bytes;
// - the wrapped response is accepted exactly when CheckSerializedResponse accepts it alone.
//
// Two builds of this file (triton_fastpath/native/cache_plugin.py::run_decoder_fuzz):
// - libFuzzer (clang -fsanitize=fuzzer,address,undefined): libFuzzer's main; seeds are written to
//   $FASTPATH_FUZZ_SEED_DIR (the corpus directory) in LLVMFuzzerInitialize, before libFuzzer reads it;
// - -DFASTPATH_FUZZ_STANDALONE (g++ -fsanitize=address,undefined, where clang has no libFuzzer): a
//   mutation loop over the same seeds: fuzz_fastpath_cache --runs N [--seed S].
// Both print "fuzz counts: runs=R decodes=D accepted=A refused=F" at a normal exit.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec.h"
#include "core_deserialize.h"

using namespace fastpath_cache;  // NOLINT

namespace {

const std::string kKey = "fastpath:rc:fuzz-namespace:8146385718345087512";

const HmacSha256& Secret() {
  static const HmacSha256 secret("fuzzing-secret-0123456789");
  return secret;
}

struct Counts {
  uint64_t runs = 0;
  uint64_t decodes = 0;
  uint64_t accepted = 0;
  uint64_t refused = 0;
} counts;

void PrintCounts() {
  std::printf("fuzz counts: runs=%llu decodes=%llu accepted=%llu refused=%llu\n",
              static_cast<unsigned long long>(counts.runs), static_cast<unsigned long long>(counts.decodes),
              static_cast<unsigned long long>(counts.accepted), static_cast<unsigned long long>(counts.refused));
  std::fflush(stdout);
}

[[noreturn]] void Violated(const std::string& what) {
  std::fprintf(stderr, "INVARIANT VIOLATED: %s\n", what.c_str());
  std::abort();
}

void CheckAccepted(const Entry& entry) {
  std::vector<std::pair<const void*, size_t>> buffers;
  for (const std::string& b : entry.buffers) buffers.emplace_back(b.data(), b.size());
  std::vector<core_copy::Response> built;
  std::string error;
  if (!core_copy::DeserializeBuffers(buffers, kResponsesPerEntry, &built, &error)) {
    Violated("an accepted value that core refuses: " + error);
  }
  for (const core_copy::Response& response : built) {
    if (response.empty()) Violated("an accepted value with no outputs");
  }
}

void Decode(const std::string& value, const HmacSha256* mac, bool* accepted) {
  Entry entry;
  std::string error;
  ++counts.decodes;
  *accepted = DecodeEntry(value, kKey, mac, &entry, &error) == DecodeResult::kOk;
  if (!*accepted) {
    ++counts.refused;
    return;
  }
  ++counts.accepted;
  CheckAccepted(entry);
  if (EncodeEntry(kKey, entry, mac) != value) Violated("an accepted value that is not its own encoding");
}

// The bytes of an input read as choices; once they run out, every choice is 0 (a right length).
class Choices {
 public:
  Choices(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : Byte() % n; }
  template <typename T>
  T Raw() {
    T value = 0;
    for (size_t i = 0; i < sizeof(T); ++i) value = static_cast<T>((value << 8) | Byte());
    return value;
  }
  // A length field: mostly `right`; 1 in 8 off by -8..+8; 1 in 32 any 32-bit value.
  template <typename T>
  T Length(uint64_t right) {
    const uint8_t pick = Byte();
    if (pick % 32 == 31) return static_cast<T>(Raw<uint32_t>());
    if (pick % 8 == 7) return static_cast<T>(right + (Byte() % 17) - 8);
    return static_cast<T>(right);
  }
  // 0..7 stray bytes, 1 time in 16.
  std::string Stray() { return Byte() % 16 == 15 ? std::string(1 + Below(7), static_cast<char>(Byte())) : ""; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

template <typename T>
void Append(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

std::string Structured(const uint8_t* data, size_t size) {
  static const char* const dtypes[] = {"BOOL",  "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                                       "INT64", "FP16",  "FP32",   "FP64",   "BYTES",  "BF16", "FP33",  ""};
  static const int element_bytes[] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 0, 2, 4, 1};
  Choices c(data, size);
  std::string out;
  const uint32_t outputs = static_cast<uint32_t>(c.Below(4));
  Append<uint32_t>(&out, c.Length<uint32_t>(outputs));
  for (uint32_t o = 0; o < outputs; ++o) {
    std::string body;
    const std::string name = c.Byte() % 8 == 7 ? "y" : std::string(1 + c.Below(4), static_cast<char>('a' + c.Below(3)));
    Append<uint32_t>(&body, c.Length<uint32_t>(name.size()));
    body += name + c.Stray();
    const size_t d = c.Below(16);
    const std::string dtype = dtypes[d];
    Append<uint32_t>(&body, c.Length<uint32_t>(dtype.size()));
    body += dtype + c.Stray();
    const size_t rank = c.Below(4);
    std::vector<int64_t> shape;
    uint64_t elements = 1;
    for (size_t i = 0; i < rank; ++i) {
      const int64_t dim =
          c.Byte() % 32 == 31 ? static_cast<int64_t>(c.Raw<uint64_t>()) : static_cast<int64_t>(c.Below(4));
      shape.push_back(dim);
      elements = dim >= 0 && dim < 64 ? elements * static_cast<uint64_t>(dim) : 1;
    }
    Append<uint32_t>(&body, c.Length<uint32_t>(rank * sizeof(int64_t)));
    for (int64_t dim : shape) Append<int64_t>(&body, dim);
    body += c.Stray();
    std::string tensor;
    if (element_bytes[d] == 0) {
      const uint64_t n = c.Length<uint64_t>(std::min<uint64_t>(elements, 64));
      for (uint64_t i = 0; i < std::min<uint64_t>(n, 64); ++i) {
        const size_t length = c.Below(6);
        Append<uint32_t>(&tensor, c.Length<uint32_t>(length));
        tensor += std::string(length, 's');
      }
    } else {
      tensor.assign(std::min<uint64_t>(elements, 256) * element_bytes[d], '\1');
    }
    tensor += c.Stray();
    Append<uint64_t>(&body, c.Length<uint64_t>(tensor.size()));
    body += tensor + c.Stray();
    Append<uint64_t>(&out, c.Length<uint64_t>(body.size()));
    out += body;
  }
  return out + c.Stray();
}

void OneInput(const uint8_t* data, size_t size) {
  ++counts.runs;
  const std::string input(reinterpret_cast<const char*>(data), size);
  bool accepted = false;
  Decode(input, nullptr, &accepted);
  for (const std::string& response : {input, Structured(data, size)}) {
    Entry wrapped;
    wrapped.buffers = {response};
    Decode(EncodeEntry(kKey, wrapped, &Secret()), &Secret(), &accepted);
    const bool alone = CheckSerializedResponse(response.data(), response.size()) == ResponseCheck::kOk;
    if (accepted != alone) Violated("the response check alone and inside a value disagree");
  }
}

// --- seeds: valid responses and values of every kind ---

template <typename T>
void Put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

std::string Output(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                   const std::string& data) {
  std::string body;
  Put<uint32_t>(&body, name.size());
  body += name;
  Put<uint32_t>(&body, dtype.size());
  body += dtype;
  Put<uint32_t>(&body, shape.size() * sizeof(int64_t));
  for (int64_t d : shape) Put<int64_t>(&body, d);
  Put<uint64_t>(&body, data.size());
  body += data;
  std::string out;
  Put<uint64_t>(&out, body.size());
  return out + body;
}

std::string Response(const std::vector<std::string>& outputs) {
  std::string out;
  Put<uint32_t>(&out, outputs.size());
  for (const auto& o : outputs) out += o;
  return out;
}

std::string Strings(const std::vector<std::string>& elements) {
  std::string out;
  for (const auto& e : elements) {
    Put<uint32_t>(&out, e.size());
    out += e;
  }
  return out;
}

std::vector<std::string> Seeds() {
  const std::vector<std::string> responses = {
      Response({Output("y", "FP32", {1, 4}, std::string(16, '\x3f'))}),
      Response({Output("logits", "FP32", {2, 3}, std::string(24, '\1')),
                Output("ids", "INT64", {2}, std::string(16, '\2'))}),
      Response({Output("text", "BYTES", {3}, Strings({"positive", "", "neg"}))}),
      Response({Output("empty", "FP16", {0, 8}, "")}),
      Response({Output("scalar", "BOOL", {}, "\1")}),
      Response({Output("u", "UINT16", {2}, "abcd"), Output("b", "BF16", {1}, "xy"),
                Output("d", "FP64", {1}, "12345678")}),
      Response({Output("s", "BYTES", {1, 2}, Strings({"a", "bcdefgh"})), Output("i", "INT8", {3}, "abc")}),
      Response({}),
  };
  std::vector<std::string> seeds = responses;
  for (const std::string& response : responses) {
    Entry entry;
    entry.buffers = {response};
    seeds.push_back(EncodeEntry(kKey, entry, nullptr));
  }
  return seeds;
}

}  // namespace

#ifndef FASTPATH_FUZZ_STANDALONE

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::atexit(PrintCounts);
  const char* dir = std::getenv("FASTPATH_FUZZ_SEED_DIR");
  if (dir != nullptr && *dir) {
    const std::vector<std::string> seeds = Seeds();
    for (size_t i = 0; i < seeds.size(); ++i) {
      const std::string path = std::string(dir) + "/seed-" + std::to_string(i);
      FILE* f = std::fopen(path.c_str(), "wb");
      if (f == nullptr) continue;
      std::fwrite(seeds[i].data(), 1, seeds[i].size(), f);
      std::fclose(f);
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  OneInput(data, size);
  return 0;
}

#else

namespace {

// A small mutator in libFuzzer's spirit: bit flips, random bytes, interesting integers written
// over length fields, insertions, deletions, truncation and splices of two inputs.
std::string Mutate(const std::string& base, const std::vector<std::string>& pool, std::mt19937_64* rng) {
  std::string s = base;
  auto pick = [&](size_t n) { return n == 0 ? 0 : static_cast<size_t>((*rng)() % n); };
  static const uint64_t interesting[] = {0,          1,          2,          3,          4,          7,
                                         8,          16,         0x7F,       0xFF,       0x100,      0x7FFF,
                                         0xFFFF,     0x7FFFFFF0, 0x7FFFFFFF, 0xFFFFFFFF, UINT64_MAX, UINT64_MAX / 2};
  const int rounds = 1 + static_cast<int>(pick(4));
  for (int r = 0; r < rounds; ++r) {
    switch (pick(8)) {
      case 0:
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 << pick(8));
        break;
      case 1:
        if (!s.empty()) s[pick(s.size())] = static_cast<char>((*rng)());
        break;
      case 2:
      case 3: {  // an interesting u32 or u64 over any position (a length field, often)
        const uint64_t v = interesting[pick(sizeof(interesting) / sizeof(interesting[0]))] + pick(3) - 1;
        const size_t width = pick(2) ? 4 : 8;
        if (s.size() >= width) std::memcpy(&s[pick(s.size() - width + 1)], &v, width);
        break;
      }
      case 4:
        s.insert(pick(s.size() + 1), std::string(1 + pick(8), static_cast<char>((*rng)())));
        break;
      case 5:
        if (!s.empty()) s.erase(pick(s.size()), 1 + pick(8));
        break;
      case 6:
        s.resize(pick(s.size() + 1));
        break;
      case 7: {
        const std::string& other = pool[pick(pool.size())];
        s = s.substr(0, pick(s.size() + 1)) + other.substr(pick(other.size() + 1));
        break;
      }
    }
  }
  if (s.size() > 4096) s.resize(4096);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t runs = 1'000'000;
  uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--runs") runs = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::string(argv[i]) == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
  }
  std::mt19937_64 rng(seed);
  std::vector<std::string> pool = Seeds();
  for (const std::string& s : pool) OneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  const size_t kPoolMax = 4096;
  while (counts.runs < runs) {
    const std::string input = Mutate(pool[rng() % pool.size()], pool, &rng);
    const uint64_t accepted = counts.accepted;
    OneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    // Keep accepted mutants (new valid shapes) as bases, and a few refused ones (near misses).
    if ((counts.accepted != accepted || rng() % 64 == 0) && pool.size() < kPoolMax) pool.push_back(input);
  }
  PrintCounts();
  return 0;
}

#endif
