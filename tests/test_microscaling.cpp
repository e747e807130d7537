// SPDX-License-Identifier: Apache-2.0
// The OCP Microscaling policies (mxfp8, mxfp6, mxfp4): element values as the spec tabulates them,
// round-to-nearest-even against a brute-force search over every element, the shared scale's two
// rules, stochastic rounding's neighbours and mean, and blocks through the whole codec.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support.hpp"

TEST_SUITE_BEGIN("microscaling");

namespace {

// The element value of a code, from the spec's definition, in double: (-1)^S * 2^(E - bias) *
// (1 + M / 2^m) for E > 0, (-1)^S * 2^(1 - bias) * (M / 2^m) for E = 0 (written apart from the
// library's bit assembly on purpose).
template <class F>
double spec_value(std::uint32_t code) {
  constexpr int m = F::mantissa_bits, bits = 1 + F::exponent_bits + F::mantissa_bits;
  const double sign = (code >> (bits - 1)) & 1u ? -1.0 : 1.0;
  const std::uint32_t magnitude = code & ((1u << (bits - 1)) - 1u);
  const int field = static_cast<int>(magnitude >> m);
  const double mantissa = static_cast<double>(magnitude & ((1u << m) - 1u)) / (1 << m);
  if (field == 0) return sign * std::ldexp(mantissa, 1 - F::bias);
  return sign * std::ldexp(1.0 + mantissa, field - F::bias);
}

template <class F>
constexpr std::uint32_t element_codes() {
  return 1u << (1 + F::exponent_bits + F::mantissa_bits);
}

// The code round-to-nearest-even gives v: the finite element nearest to v, ties to the even code
// (an even mantissa), saturating past the largest; the sign of v kept on zero.
template <class F>
std::uint32_t nearest_code(double v) {
  constexpr int bits = 1 + F::exponent_bits + F::mantissa_bits;
  const std::uint32_t sign = std::signbit(v) ? 1u << (bits - 1) : 0u;
  const double a = std::abs(v);
  std::uint32_t best = 0;
  for (std::uint32_t c = 1; c <= static_cast<std::uint32_t>(F::max_code); ++c) {
    const double d = std::abs(spec_value<F>(c) - a), best_d = std::abs(spec_value<F>(best) - a);
    if (d < best_d || (d == best_d && (c & 1u) == 0)) best = c;
  }
  return sign | best;
}

template <class F>
int floor_log2(double a) {
  int e;
  std::frexp(a, &e);
  return e - 1;
}

template <class F>
double max_finite() {
  return spec_value<F>(static_cast<std::uint32_t>(F::max_code));
}

// Floats of every kind a block meets: normal over a wide range of binades, subnormal, ties
// between elements, past the largest element, zeros of both signs.
template <class F>
std::vector<double> probe_values(int e, std::uint32_t seed) {
  std::vector<double> v;
  const double scale = std::ldexp(1.0, e);
  for (std::uint32_t c = 0; c <= static_cast<std::uint32_t>(F::max_code); ++c) {
    const double here = spec_value<F>(c);
    v.push_back(here * scale);
    if (c < static_cast<std::uint32_t>(F::max_code)) {
      const double next = spec_value<F>(c + 1);
      v.push_back((here + next) / 2 * scale);                       // a tie
      v.push_back(std::nextafter((here + next) / 2, 0.0) * scale);  // just below it
      v.push_back(std::nextafter((here + next) / 2, 1e9) * scale);  // just above it
    }
  }
  const double top = max_finite<F>() * scale;
  v.push_back(top * 1.03);
  v.push_back(top * 1.5);
  v.push_back(top * 3.9);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> exponent(-30.0, 1.0), mantissa(1.0, 2.0);
  for (int i = 0; i < 2000; ++i)
    v.push_back(std::ldexp(mantissa(rng), static_cast<int>(std::floor(exponent(rng)))) * top);
  std::vector<double> out;
  for (double x : v) {
    const float f = static_cast<float>(x);  // the codec's inputs are floats
    if (!std::isfinite(f)) continue;
    out.push_back(f);
    out.push_back(-f);
  }
  out.push_back(0.0);
  out.push_back(-0.0);
  return out;
}

template <class F>
void check_element_values() {
  CAPTURE(qsdp::mx<F>::name);
  for (std::uint32_t c = 0; c < element_codes<F>(); ++c) {
    CAPTURE(c);
    const float got = qsdp::detail::minifloat_decode<F>(c);
    const std::uint32_t magnitude = c & (element_codes<F>() / 2 - 1);
    if (F::inf_code >= 0 && magnitude > static_cast<std::uint32_t>(F::inf_code)) {
      CHECK(std::isnan(got));
    } else if (F::inf_code >= 0 && magnitude == static_cast<std::uint32_t>(F::inf_code)) {
      CHECK(std::isinf(got));
      CHECK(std::signbit(got) == (c != magnitude));
    } else if (F::nan_code >= 0 && magnitude == static_cast<std::uint32_t>(F::nan_code)) {
      CHECK(std::isnan(got));
    } else {
      CHECK(static_cast<double>(got) == spec_value<F>(c));
      CHECK(std::signbit(got) == (c != magnitude));
    }
  }
}

template <class F>
void check_nearest_even() {
  CAPTURE(qsdp::mx<F>::name);
  int checked = 0;
  for (int e : {-127, -40, -9, -1, 0, 3, 20, 100, 127}) {
    for (double v : probe_values<F>(e, static_cast<std::uint32_t>(e + 200))) {
      const double scaled = v / std::ldexp(1.0, e);  // exact: a power of two in double
      const std::uint32_t want = nearest_code<F>(scaled);
      const std::uint32_t got =
          qsdp::detail::minifloat_encode<F, false>(static_cast<float>(v), e, 0.5f);
      if (got != want) {
        CAPTURE(e);
        CAPTURE(v);
        CHECK(got == want);
      }
      ++checked;
    }
  }
  CHECK(checked > 10000);
}

template <class F>
void check_scales() {
  CAPTURE(qsdp::mx<F>::name);
  const int emax = floor_log2<F>(max_finite<F>());
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> any_bits(0, 0x7F7FFFFFu);
  for (int i = 0; i < 20000; ++i) {
    const float a = std::bit_cast<float>(i < 4 ? std::uint32_t(i) : any_bits(rng));
    CAPTURE(a);
    // FLOOR: 2^(floor(log2 a) - emax); a subnormal or zero a counts as 2^-127.
    const int floor_want =
        std::max(-127, std::min(127, (a >= 0x1p-126f ? floor_log2<F>(a) : -127) - emax));
    CHECK(qsdp::detail::mx_floor_exponent<F>(a) == floor_want);
    // CEIL: the smallest e (>= -127) with a <= max finite * 2^e.
    const int e = qsdp::detail::mx_ceil_exponent<F>(a);
    CHECK(e >= -127);
    CHECK(static_cast<double>(a) <= std::ldexp(max_finite<F>(), e));
    if (e > -127) CHECK(static_cast<double>(a) > std::ldexp(max_finite<F>(), e - 1));
  }
  // At the boundary: abs_max exactly the largest element times 2^k fits at k, one ulp more does
  // not.
  for (int k : {-100, -10, -1, 0, 1, 7, 60}) {
    const float a = static_cast<float>(std::ldexp(max_finite<F>(), k));
    CHECK(qsdp::detail::mx_ceil_exponent<F>(a) == k);
    CHECK(qsdp::detail::mx_ceil_exponent<F>(std::nextafter(a, 1e30f)) == k + 1);
  }
  // The spec's own example of the rule: abs_max 1.0 -> X = 2^(0 - emax).
  CHECK(qsdp::detail::mx_floor_exponent<F>(1.0f) == -emax);
  CHECK(qsdp::detail::e8m0_value(qsdp::detail::e8m0_byte(-127)) == 0x1p-127f);
  CHECK(qsdp::detail::e8m0_value(qsdp::detail::e8m0_byte(127)) == 0x1p127f);
  CHECK(std::isnan(qsdp::detail::e8m0_value(qsdp::detail::e8m0_nan)));
}

// Stochastic rounding over every fourth draw of the codec's grid (u = (h + 1/2) / 2^16): each code
// is one of v's two neighbours, and the mean lands within 4 / 2^16 of their gap of v.
template <class F>
void check_stochastic() {
  CAPTURE(qsdp::mx<F>::name);
  const int e = -3;
  const double scale = std::ldexp(1.0, e);
  const std::vector<double> probes = probe_values<F>(e, 11);
  for (std::size_t p = 0; p < probes.size(); p += 5) {  // ties, neighbours and random values
    const double v = probes[p];
    const double scaled = v / scale;
    if (std::abs(scaled) > max_finite<F>()) continue;  // the CEIL scale never lets this happen
    CAPTURE(v);
    // The neighbours: the largest element <= |scaled| and the smallest >= it.
    double below = 0, above = max_finite<F>();
    for (std::uint32_t c = 0; c <= static_cast<std::uint32_t>(F::max_code); ++c) {
      const double x = spec_value<F>(c);
      if (x <= std::abs(scaled)) below = std::max(below, x);
      if (x >= std::abs(scaled)) above = std::min(above, x);
    }
    double sum = 0;
    bool on_neighbours = true;
    constexpr std::uint32_t stride = 4, draws = 65536 / stride;
    for (std::uint32_t h = 0; h < 65536; h += stride) {
      const float u = qsdp::detail::uniform_from_half(h);
      const std::uint32_t code =
          qsdp::detail::minifloat_encode<F, true>(static_cast<float>(v), e, u);
      const double got = std::abs(spec_value<F>(code));
      on_neighbours = on_neighbours && (got == below || got == above);
      sum += got;
    }
    CHECK(on_neighbours);
    CHECK(std::abs(sum / draws - std::abs(scaled)) <= (above - below) * stride / 65536);
  }
}

// Through qsdp::encode / decode: every decoded value is the element the brute force picks for it
// times the scale the spec's rule gives its block.
template <class F>
void check_codec_nearest(std::size_t count) {
  qsdp::mx<F> q{};
  CAPTURE(q.name);
  const int emax = floor_log2<F>(max_finite<F>());
  for (auto d : {qsdp_test::distribution::normal, qsdp_test::distribution::gradient_with_outliers,
                 qsdp_test::distribution::mixed_scale}) {
    const auto x = qsdp_test::make_data(d, count, 5);
    const auto y = qsdp_test::round_trip(q, x);
    for (std::size_t b = 0; b < count; b += q.bucket_size) {
      const std::size_t end = std::min(count, b + q.bucket_size);
      float abs_max = 0;
      for (std::size_t i = b; i < end; ++i) abs_max = std::max(abs_max, std::abs(x[i]));
      const int e = std::max(-127, (abs_max >= 0x1p-126f ? floor_log2<F>(abs_max) : -127) - emax);
      for (std::size_t i = b; i < end; ++i) {
        const double want =
            spec_value<F>(nearest_code<F>(x[i] / std::ldexp(1.0, e))) * std::ldexp(1.0, e);
        if (static_cast<double>(y[i]) != want) {
          CAPTURE(i);
          CAPTURE(x[i]);
          CHECK(static_cast<double>(y[i]) == want);
        }
      }
    }
  }
}

// tests/golden/mx_torchao.txt: torchao's to_mx (FLOOR scale) of fixed inputs, per format, input
// class and dtype (tests/golden/mx_torchao.py wrote it); nvfp4_torchao.txt likewise for NVFP4.
// Keys are the line up to its last word.
std::map<std::string, std::vector<std::uint8_t>> read_torchao_reference(
    const char* name = "mx_torchao.txt") {
  const std::string path = std::string(QSDP_SOURCE_DIR "/tests/golden/") + name;
  std::ifstream file(path);
  REQUIRE_MESSAGE(file.good(), "cannot read " << path);
  std::map<std::string, std::vector<std::uint8_t>> lines;
  for (std::string line; std::getline(file, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t space = line.rfind(' ');
    REQUIRE(space != std::string::npos);
    std::vector<std::uint8_t> bytes;
    for (std::size_t i = space + 1; i + 1 < line.size(); i += 2)
      bytes.push_back(static_cast<std::uint8_t>(std::stoul(line.substr(i, 2), nullptr, 16)));
    lines[line.substr(0, space)] = std::move(bytes);
  }
  return lines;
}

template <class T>
std::vector<T> words_of(const std::vector<std::uint8_t>& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

struct match_count {
  std::size_t scales = 0, scales_total = 0, codes = 0, codes_total = 0, decoded = 0,
              decoded_total = 0, smallest_scale_values = 0;
};

// qsdp's mx<F> against torchao on one input: the scale byte of each finite block, each of its
// element codes (fit and encode, the functions the codec runs), and the codec's decoded values.
// A block holding NaN decodes to NaN in both; one holding an infinity decodes to NaN in qsdp (its
// rule for every policy), while torchao 0.18 keeps the infinity and flushes the rest of the block.
// A block whose scale byte is 0 (2^-127 in E8M0, and in torchao's decoder) is where torchao 0.18's
// encoder divides by 2^-126 instead (a float32 scale clamped to the smallest normal; torchao's
// later source divides by 2^-127): there its elements must equal qsdp's encoding at 2^-126, and
// they are counted apart.
template <class F>
match_count compare_with_torchao(const std::map<std::string, std::vector<std::uint8_t>>& ref,
                                 const std::string& cls, const std::string& dtype,
                                 const std::vector<float>& x) {
  const std::string head = std::string(qsdp::mx<F>::name) + " " + cls + " " + dtype;
  const std::string key = std::string(F::name) + " " + cls + " " + dtype;
  REQUIRE_MESSAGE(ref.count(key + " scales"), "no reference for " << key);
  const auto& scales = ref.at(key + " scales");
  const auto& codes = ref.at(key + " codes");
  const auto decoded = words_of<std::uint32_t>(ref.at(key + " decoded"));
  REQUIRE(codes.size() == x.size());
  REQUIRE(decoded.size() == x.size());
  REQUIRE(scales.size() * 32 == x.size());
  qsdp::mx<F> q{};
  const auto y = qsdp_test::round_trip(q, x);
  match_count n;
  for (std::size_t b = 0; b < scales.size(); ++b) {
    qsdp::bucket_stats stats{};
    bool finite = true;
    for (std::size_t i = b * 32; i < (b + 1) * 32; ++i) {
      finite = finite && std::isfinite(x[i]);
      stats.abs_max = std::max(stats.abs_max, std::abs(x[i]));
    }
    if (!finite) {
      for (std::size_t i = b * 32; i < (b + 1) * 32; ++i) {
        ++n.decoded_total;
        n.decoded += std::isnan(y[i]) ? 1 : 0;
      }
      continue;
    }
    const std::uint8_t scale = q.fit(stats);
    ++n.scales_total;
    n.scales += scale == scales[b] ? 1 : 0;
    CHECK_MESSAGE(scale == scales[b], head << " block " << b << ": scale " << int{scale}
                                           << ", torchao " << int{scales[b]});
    if (scale == 0) {
      for (std::size_t i = b * 32; i < (b + 1) * 32; ++i) {
        ++n.smallest_scale_values;
        CHECK(qsdp::detail::minifloat_encode<F, false>(x[i], -126, 0.0f) == codes[i]);
      }
      continue;
    }
    for (std::size_t i = b * 32; i < (b + 1) * 32; ++i) {
      const std::uint32_t code = q.encode(x[i], scale, 0.0f);
      ++n.codes_total;
      n.codes += code == codes[i] ? 1 : 0;
      CHECK_MESSAGE(code == codes[i], head << " value " << i << " (" << x[i] << "): code " << code
                                           << ", torchao " << int{codes[i]});
      ++n.decoded_total;
      const bool same = std::bit_cast<std::uint32_t>(y[i]) == decoded[i];
      n.decoded += same ? 1 : 0;
      CHECK_MESSAGE(same, head << " value " << i << " (" << x[i] << "): decoded " << y[i]
                               << ", torchao " << std::bit_cast<float>(decoded[i]));
    }
  }
  return n;
}

// Runs check.template operator()<F>() for every element format.
template <class Check>
void for_each_format(Check check) {
  check.template operator()<qsdp::e4m3>();
  check.template operator()<qsdp::e5m2>();
  check.template operator()<qsdp::e3m2>();
  check.template operator()<qsdp::e2m3>();
  check.template operator()<qsdp::e2m1>();
}

struct nvfp4_match_count {
  std::size_t tensor_scales = 0, scales = 0, scales_total = 0, codes = 0, codes_total = 0,
              decoded = 0, decoded_total = 0;
  bool below_min_tensor_scale = false;
};

// qsdp's nvfp4 against torchao's to_nvfp4 on one input: the tensor scale (fit_tensor of the
// largest finite magnitude), the E4M3 scale byte of each finite block and its element codes (fit
// and encode with that tensor scale), and the codec's decoded values. A block holding NaN or an
// infinity decodes to NaN in qsdp. Where torchao's tensor scale is below 2^-120 its own arithmetic
// overflows (1 / scale / block scale is infinite); qsdp keeps 2^-120 there, and such an input only
// counts whether qsdp decodes it within NVFP4's error.
nvfp4_match_count compare_nvfp4_with_torchao(
    const std::map<std::string, std::vector<std::uint8_t>>& ref, const std::string& cls,
    const std::string& dtype, const std::vector<float>& x) {
  const std::string key = "nvfp4 " + cls + " " + dtype;
  REQUIRE_MESSAGE(ref.count(key + " scales"), "no reference for " << key);
  const float tensor_scale = words_of<float>(ref.at(key + " tensor_scale")).at(0);
  const auto& scales = ref.at(key + " scales");
  const auto& codes = ref.at(key + " codes");
  const auto decoded = words_of<std::uint32_t>(ref.at(key + " decoded"));
  REQUIRE(codes.size() == x.size());
  REQUIRE(scales.size() * 16 == x.size());
  const qsdp::nvfp4<> q{};
  const auto y = qsdp_test::round_trip(q, x);
  float abs_max = 0;
  for (float v : x)
    if (std::isfinite(v)) abs_max = std::max(abs_max, std::abs(v));
  nvfp4_match_count n;
  qsdp::nvfp4<> bound = q;
  bound.tensor_meta = q.fit_tensor(abs_max);
  if (tensor_scale < qsdp::detail::nvfp4_min_tensor_scale) {
    n.below_min_tensor_scale = true;
    CHECK(bound.tensor_meta == qsdp::detail::nvfp4_min_tensor_scale);
    for (std::size_t i = 0; i < x.size(); ++i) {
      // The block scale is at least 2^-6 * 2^-120, so a value decodes within half of that times
      // the largest gap, 2.
      ++n.decoded_total;
      const bool close = std::abs(static_cast<double>(y[i]) - x[i]) <= 0x1p-126;
      n.decoded += close ? 1 : 0;
      CHECK_MESSAGE(close, key << " value " << i << " (" << x[i] << "): decoded " << y[i]);
    }
    return n;
  }
  n.tensor_scales = bound.tensor_meta == tensor_scale ? 1 : 0;
  CHECK_MESSAGE(bound.tensor_meta == tensor_scale,
                key << ": tensor scale " << bound.tensor_meta << ", torchao " << tensor_scale);
  for (std::size_t b = 0; b < scales.size(); ++b) {
    qsdp::bucket_stats stats{};
    bool finite = true;
    for (std::size_t i = b * 16; i < (b + 1) * 16; ++i) {
      finite = finite && std::isfinite(x[i]);
      stats.abs_max = std::max(stats.abs_max, std::abs(x[i]));
    }
    if (!finite) {
      for (std::size_t i = b * 16; i < (b + 1) * 16; ++i) {
        ++n.decoded_total;
        n.decoded += std::isnan(y[i]) ? 1 : 0;
      }
      continue;
    }
    const std::uint8_t scale = bound.fit(stats);
    ++n.scales_total;
    n.scales += scale == scales[b] ? 1 : 0;
    CHECK_MESSAGE(scale == scales[b], key << " block " << b << ": scale " << int{scale}
                                          << ", torchao " << int{scales[b]});
    for (std::size_t i = b * 16; i < (b + 1) * 16; ++i) {
      const std::uint32_t code = bound.encode(x[i], scale, 0.0f);
      ++n.codes_total;
      n.codes += code == codes[i] ? 1 : 0;
      CHECK_MESSAGE(code == codes[i], key << " value " << i << " (" << x[i] << "): code " << code
                                          << ", torchao " << int{codes[i]});
      ++n.decoded_total;
      const bool same = std::bit_cast<std::uint32_t>(y[i]) == decoded[i];
      n.decoded += same ? 1 : 0;
      CHECK_MESSAGE(same, key << " value " << i << " (" << x[i] << "): decoded " << y[i]
                              << ", torchao " << std::bit_cast<float>(decoded[i]));
    }
  }
  return n;
}

}  // namespace

static_assert(qsdp::quantizer<qsdp::mxfp8<qsdp::e4m3>>);
static_assert(qsdp::quantizer<qsdp::mxfp8<qsdp::e5m2, qsdp::rounding::stochastic>>);
static_assert(qsdp::quantizer<qsdp::mxfp6<qsdp::e3m2>>);
static_assert(qsdp::quantizer<qsdp::mxfp6<qsdp::e2m3>>);
static_assert(qsdp::quantizer<qsdp::mxfp4<>>);
static_assert(qsdp::quantizer<qsdp::hadamard<qsdp::mxfp4<qsdp::rounding::stochastic>>>);
static_assert(qsdp::mxfp8<>::bits == 8 && qsdp::mxfp6<>::bits == 6 && qsdp::mxfp4<>::bits == 4);

TEST_CASE("MX element codes decode to the values the OCP spec defines") {
  for_each_format([]<class F>() { check_element_values<F>(); });
  // The spec's figures for each format.
  CHECK(max_finite<qsdp::e4m3>() == 448.0);
  CHECK(max_finite<qsdp::e5m2>() == 57344.0);
  CHECK(max_finite<qsdp::e3m2>() == 28.0);
  CHECK(max_finite<qsdp::e2m3>() == 7.5);
  CHECK(max_finite<qsdp::e2m1>() == 6.0);
  CHECK(spec_value<qsdp::e4m3>(1) == 0x1p-9);
  CHECK(spec_value<qsdp::e4m3>(8) == 0x1p-6);
  CHECK(spec_value<qsdp::e5m2>(1) == 0x1p-16);
  CHECK(spec_value<qsdp::e5m2>(4) == 0x1p-14);
  CHECK(spec_value<qsdp::e3m2>(1) == 0.0625);
  CHECK(spec_value<qsdp::e2m3>(1) == 0.125);
  const double fp4[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (std::uint32_t c = 0; c < 8; ++c) {
    CHECK(qsdp::detail::minifloat_decode<qsdp::e2m1>(c) == static_cast<float>(fp4[c]));
    CHECK(qsdp::detail::minifloat_decode<qsdp::e2m1>(c | 8) == static_cast<float>(-fp4[c]));
  }
  CHECK(std::bit_cast<std::uint32_t>(qsdp::detail::minifloat_decode<qsdp::e4m3>(0x80)) ==
        0x80000000u);  // negative zero
}

TEST_CASE("MX round to nearest picks the nearest element, ties to even, saturating") {
  for_each_format([]<class F>() { check_nearest_even<F>(); });
}

TEST_CASE("MX shared scales follow the spec's floor rule and the no-saturation ceiling rule") {
  for_each_format([]<class F>() { check_scales<F>(); });
}

TEST_CASE("MX stochastic rounding lands on a neighbour and is unbiased") {
  for_each_format([]<class F>() { check_stochastic<F>(); });
  // The threshold itself: 1 + f * 1/8 (E4M3's gap above 1) with f exactly the draw of half 1000
  // rounds up for every smaller draw and down from that draw on, so P(up) is f, not f + 2^-16.
  const std::uint32_t h = 1000;
  const float f = qsdp::detail::uniform_from_half(h);
  const float v = 1.0f + f * 0.125f;
  using qsdp::detail::minifloat_encode;
  const std::uint32_t one = 0x38, next = 0x39;  // E4M3 codes of 1 and 1.125
  CHECK(minifloat_encode<qsdp::e4m3, true>(v, 0, qsdp::detail::uniform_from_half(h - 1)) == next);
  CHECK(minifloat_encode<qsdp::e4m3, true>(v, 0, f) == one);
  CHECK(minifloat_encode<qsdp::e4m3, true>(-v, 0, f) == (0x80u | one));
}

TEST_CASE("MX policies through the codec: the spec's element times the block's scale") {
  for (std::size_t count : {std::size_t{32}, std::size_t{1000}, std::size_t{4099}}) {
    CAPTURE(count);
    for_each_format([count]<class F>() { check_codec_nearest<F>(count); });
  }
}

// The device's bf16 stores skip saturation only for policies that promise few significant bits:
// MX's elements, not a rotated block's sums nor an integer grid's values.
static_assert(qsdp::detail::decoded_significant_bits<qsdp::mxfp8<>>() == 4);
static_assert(qsdp::detail::decoded_significant_bits<qsdp::mxfp4<>>() == 2);
static_assert(qsdp::detail::decoded_significant_bits<qsdp::hadamard<qsdp::mxfp4<>>>() == 24);
static_assert(qsdp::detail::decoded_significant_bits<qsdp::uniform<8>>() == 24);

TEST_CASE("MX packets: one E8M0 byte per block of 32, NaN and infinity blocks decode to NaN") {
  qsdp::mxfp8<> p{};
  // A packet of 4096 values holds 4096 code bytes and 128 scale bytes past a fixed header.
  CHECK(qsdp::compressed_size<float>(p, 4096) - qsdp::compressed_size<float>(p, 0) >= 4096 + 128);
  CHECK(qsdp::compressed_size<float>(p, 4096) - qsdp::compressed_size<float>(p, 0) <
        4096 + 128 + 32);
  CHECK(qsdp::compressed_size<float>(qsdp::mxfp4<>{}, 4096) - qsdp::compressed_size<float>(p, 0) <
        2048 + 128 + 32);

  std::vector<float> x(96, 1.25f);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[40] = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 64; i < 96; ++i) x[i] = 0.0f;
  x[70] = -0.0f;
  const auto y = qsdp_test::round_trip(p, x);
  for (std::size_t i = 0; i < 64; ++i) CHECK(std::isnan(y[i]));
  for (std::size_t i = 64; i < 96; ++i) CHECK(y[i] == 0.0f);
  CHECK(std::signbit(y[70]));
  CHECK_FALSE(std::signbit(y[71]));

  // The scale bytes: E8M0's NaN for the two non-finite blocks, the smallest scale for the zeros.
  std::vector<std::byte> packet(qsdp::compressed_size<float>(p, x.size()));
  qsdp::encode(p, x.data(), x.size(), packet.data(), qsdp::rng_position{});
  const auto l = qsdp::detail::layout_for<qsdp::mxfp8<>, float>(p, x.size());
  CHECK(packet[l.meta_offset] == std::byte{0xFF});
  CHECK(packet[l.meta_offset + 1] == std::byte{0xFF});
  CHECK(packet[l.meta_offset + 2] == std::byte{0x00});
}

// The block-scaled layout of one MX packet: the element read back from the layout (its own
// decoding, independent of the codec's) times the block's scale is the value decode gives.
template <class F, qsdp::rounding R>
void check_block_scaled_layout(std::size_t count) {
  qsdp::mx<F, R> q{};
  if constexpr (R == qsdp::rounding::stochastic) q.seed = 11;
  auto x = qsdp_test::make_data(qsdp_test::distribution::normal, count, 21);
  x[40] = std::numeric_limits<float>::quiet_NaN();  // block 1 decodes to NaN: scale byte 0xFF
  std::vector<std::byte> packet(qsdp::compressed_size<float>(q, count));
  qsdp::encode(q, x.data(), count, packet.data(), qsdp::rng_position{.call = 2});
  std::vector<float> y(count);
  qsdp::decode(q, packet.data(), count, y.data());
  const std::size_t element_bytes = qsdp::block_scaled_element_bytes(q, count);
  CHECK(element_bytes == (F::mantissa_bits + F::exponent_bits == 5 ? count : count * q.bits / 8));
  std::vector<std::byte> elements(element_bytes + 1, std::byte{0xAB});
  std::vector<std::uint8_t> scales(count / 32 + 1, 0xAB);
  qsdp::unpack_block_scaled(q, packet.data(), count, {elements.data(), scales.data()});
  CHECK(elements.back() == std::byte{0xAB});  // nothing written past the layout
  CHECK(scales.back() == 0xAB);
  CHECK(scales[1] == 0xFF);
  std::size_t same = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const unsigned byte = std::to_integer<unsigned>(elements[q.bits == 4 ? i / 2 : i]);
    const unsigned code = q.bits == 4 ? (byte >> (4 * (i % 2))) & 0xFu : byte;
    const float value =
        qsdp::detail::minifloat_decode<F>(code) * qsdp::detail::e8m0_value(scales[i / 32]);
    same += std::bit_cast<std::uint32_t>(value) == std::bit_cast<std::uint32_t>(y[i]) ||
                    (std::isnan(value) && std::isnan(y[i]))
                ? 1
                : 0;
  }
  CHECK(same == count);
}

TEST_CASE("MX packets unpack to the block-scaled layout: elements and scales a GEMM reads") {
  for_each_format([]<class F>() {
    CAPTURE(F::name);
    check_block_scaled_layout<F, qsdp::rounding::nearest>(32 * 40);
    check_block_scaled_layout<F, qsdp::rounding::stochastic>(32 * 7);
  });
  const qsdp::mxfp4<> q{};
  const auto x = qsdp_test::make_data(qsdp_test::distribution::normal, 100, 1);
  std::vector<std::byte> packet(qsdp::compressed_size<float>(q, 100));
  qsdp::encode(q, x.data(), 100, packet.data());
  std::vector<std::byte> elements(64);
  std::vector<std::uint8_t> scales(4);
  CHECK_THROWS_WITH_AS(
      qsdp::unpack_block_scaled(q, packet.data(), 100, {elements.data(), scales.data()}),
      doctest::Contains("count is 100; the block-scaled layout needs whole "
                        "blocks, a multiple of bucket_size 32"),
      qsdp::error);
  CHECK_THROWS_WITH_AS(
      qsdp::unpack_block_scaled(q, packet.data(), 96, {elements.data(), scales.data()}),
      doctest::Contains("packet holds 100 values, decoder was asked for 96"), qsdp::error);
  std::vector<std::byte> odd(qsdp::compressed_size<float>(qsdp::mxfp4<>{.bucket_size = 3}, 99));
  qsdp::encode(qsdp::mxfp4<>{.bucket_size = 3}, x.data(), 99, odd.data());
  CHECK_THROWS_WITH_AS(qsdp::unpack_block_scaled(qsdp::mxfp4<>{.bucket_size = 3}, odd.data(), 99,
                                                 {elements.data(), scales.data()}),
                       doctest::Contains("bucket_size is 3; mxfp4's layout packs two elements "
                                         "per byte: expected it even"),
                       qsdp::error);
  std::vector<std::byte> whole(qsdp::compressed_size<float>(q, 96));
  qsdp::encode(q, x.data(), 96, whole.data());
  CHECK_THROWS_WITH_AS(qsdp::unpack_block_scaled(q, whole.data(), 96, {nullptr, scales.data()}),
                       doctest::Contains("out.elements is null with count 96"), qsdp::error);
}

TEST_CASE("block scales in cuBLAS's tiled layout: 128 x 4 tiles, rows interleaved by 32") {
  using qsdp::detail::tiled_scale_offset;
  // Inside a tile: row r, column c at (r % 32) * 16 + (r / 32) * 4 + c.
  CHECK(tiled_scale_offset(0, 0, 4) == 0);
  CHECK(tiled_scale_offset(0, 3, 4) == 3);
  CHECK(tiled_scale_offset(1, 0, 4) == 16);
  CHECK(tiled_scale_offset(31, 2, 4) == 31 * 16 + 2);
  CHECK(tiled_scale_offset(32, 0, 4) == 4);
  CHECK(tiled_scale_offset(127, 3, 4) == 31 * 16 + 3 * 4 + 3);
  // Tiles in row-major order: the next 4 columns, then the next 128 rows.
  CHECK(tiled_scale_offset(0, 4, 8) == 512);
  CHECK(tiled_scale_offset(128, 0, 8) == 2 * 512);
  CHECK(tiled_scale_offset(128, 0, 6) == 2 * 512);  // 6 columns pad to two tiles

  // 200 x 6 scales: padded to 256 x 8, every scale once, the padding zero.
  const std::size_t rows = 200, cols = 6;
  CHECK(qsdp::tiled_block_scales_size(rows, cols) == 256 * 8);
  std::vector<std::uint8_t> scales(rows * cols);
  for (std::size_t i = 0; i < scales.size(); ++i)
    scales[i] = static_cast<std::uint8_t>(1 + i % 251);
  std::vector<std::uint8_t> tiled(qsdp::tiled_block_scales_size(rows, cols), 0xEE);
  qsdp::tile_block_scales(scales.data(), rows, cols, tiled.data());
  std::vector<int> hits(tiled.size(), 0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const std::size_t at = tiled_scale_offset(r, c, cols);
      ++hits[at];
      CHECK(tiled[at] == scales[r * cols + c]);
    }
  std::size_t padding = 0;
  for (std::size_t i = 0; i < tiled.size(); ++i) {
    CHECK(hits[i] <= 1);
    if (hits[i] == 0) padding += tiled[i] == 0 ? 1 : 0;
  }
  CHECK(padding == tiled.size() - rows * cols);
  CHECK_THROWS_WITH_AS(qsdp::tile_block_scales(nullptr, 2, 2, tiled.data()),
                       doctest::Contains("scales is null with 2 x 2 scales"), qsdp::error);
}

TEST_CASE("MX stochastic through the codec: unbiased over calls, fresh draws per call") {
  qsdp::mxfp4<qsdp::rounding::stochastic> g{.bucket_size = 32, .seed = 3};
  const auto x = qsdp_test::make_data(qsdp_test::distribution::normal, 256, 9);
  std::vector<double> mean(x.size(), 0.0);
  const int calls = 2000;
  std::vector<float> first;
  bool differs = false;
  for (int c = 0; c < calls; ++c) {
    const auto y = qsdp_test::round_trip(g, x);
    if (c == 0) first = y;
    differs = differs || y != first;
    for (std::size_t i = 0; i < x.size(); ++i) mean[i] += y[i];
  }
  CHECK(differs);
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    err += std::pow(mean[i] / calls - x[i], 2);
    ref += std::pow(static_cast<double>(x[i]), 2);
  }
  // One call's FP4 error is about 0.1 of the data's norm; 2000 calls' mean error shrinks like
  // 1/sqrt(2000), to about 0.002. A bias of 1 % of the values would stand out at 0.01.
  CHECK(std::sqrt(err / ref) < 0.006);
}

TEST_CASE("hadamard<mxfp4> decodes with the error of mxfp4 on rotated values") {
  qsdp::hadamard<qsdp::mxfp4<qsdp::rounding::stochastic>> g{{.bucket_size = 32, .seed = 1}};
  const auto x = qsdp_test::make_data(qsdp_test::distribution::gradient_with_outliers, 4096, 2);
  const auto y = qsdp_test::round_trip(g, x);
  const auto z = qsdp_test::round_trip(qsdp::mxfp4<qsdp::rounding::stochastic>{.seed = 1}, x);
  double err_rotated = 0, err_plain = 0, ref = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    err_rotated += std::pow(static_cast<double>(y[i]) - x[i], 2);
    err_plain += std::pow(static_cast<double>(z[i]) - x[i], 2);
    ref += std::pow(static_cast<double>(x[i]), 2);
  }
  CHECK(std::sqrt(err_rotated / ref) < 0.5);
  CHECK(std::sqrt(err_plain / ref) < 0.5);
  MESSAGE("rel. L2: mxfp4 stochastic " << std::sqrt(err_plain / ref) << ", rotated "
                                       << std::sqrt(err_rotated / ref));
}

TEST_CASE("MX round to nearest matches torchao's to_mx bit for bit") {
  const auto ref = read_torchao_reference();
  const bool print = std::getenv("QSDP_PRINT_MX_TABLE") != nullptr;
  std::ostringstream table;
  table << "| format | input | dtype | scales | elements | decoded | values at scale byte 0 |\n"
           "|---|---|---|---|---|---|---|\n";
  int inputs = 0;
  for (const auto& entry : ref) {
    const std::string& key = entry.first;  // not a structured binding: CAPTURE takes it in a lambda
    if (key.rfind("input ", 0) != 0) continue;
    std::istringstream words(key);
    std::string word, cls, dtype;
    words >> word >> cls >> dtype;
    const std::vector<float> x = words_of<float>(entry.second);
    CAPTURE(key);
    ++inputs;
    for_each_format([&]<class F>() {
      const match_count n = compare_with_torchao<F>(ref, cls, dtype, x);
      table << "| `" << qsdp::mx<F>::name << "` | " << cls << " | " << dtype << " | " << n.scales
            << " / " << n.scales_total << " | " << n.codes << " / " << n.codes_total << " | "
            << n.decoded << " / " << n.decoded_total << " | " << n.smallest_scale_values << " |\n";
    });
  }
  CHECK(inputs == 14);  // 7 input classes, float and bfloat16
  if (print) MESSAGE(table.str());
}

static_assert(qsdp::quantizer<qsdp::nvfp4<>>);
static_assert(qsdp::quantizer<qsdp::nvfp4<qsdp::rounding::stochastic>>);
static_assert(qsdp::quantizer<qsdp::hadamard<qsdp::nvfp4<qsdp::rounding::stochastic>>>);
static_assert(qsdp::detail::tensor_scaled<qsdp::nvfp4<>>());
static_assert(qsdp::detail::tensor_scaled<qsdp::hadamard<qsdp::nvfp4<>>>());
static_assert(!qsdp::detail::tensor_scaled<qsdp::mxfp4<>>());
static_assert(qsdp::detail::decoded_significant_bits<qsdp::nvfp4<>>() == 24);

TEST_CASE("NVFP4 round to nearest matches torchao's to_nvfp4 bit for bit") {
  const auto ref = read_torchao_reference("nvfp4_torchao.txt");
  const bool print = std::getenv("QSDP_PRINT_MX_TABLE") != nullptr;
  std::ostringstream table;
  table << "| input | dtype | tensor scale | block scales | elements | decoded |\n"
           "|---|---|---|---|---|---|\n";
  int inputs = 0, below_min = 0;
  for (const auto& entry : ref) {
    const std::string& key = entry.first;
    if (key.rfind("input ", 0) != 0) continue;
    std::istringstream words(key);
    std::string word, cls, dtype;
    words >> word >> cls >> dtype;
    CAPTURE(key);
    ++inputs;
    const nvfp4_match_count n =
        compare_nvfp4_with_torchao(ref, cls, dtype, words_of<float>(entry.second));
    below_min += n.below_min_tensor_scale ? 1 : 0;
    table << "| " << cls << " | " << dtype << " | "
          << (n.below_min_tensor_scale ? std::string("below 2^-120")
                                       : std::to_string(n.tensor_scales) + " / 1")
          << " | " << n.scales << " / " << n.scales_total << " | " << n.codes << " / "
          << n.codes_total << " | " << n.decoded << " / " << n.decoded_total << " |\n";
  }
  CHECK(inputs == 16);    // 8 input classes, float and bfloat16
  CHECK(below_min == 2);  // the float32 subnormals, both dtypes
  if (print) MESSAGE(table.str());
}

TEST_CASE("NVFP4 scales: the tensor scale's bounds, the block scale's two roundings") {
  using qsdp::detail::nvfp4_block_scale;
  using qsdp::detail::nvfp4_tensor_scale;
  // abs_max / 2688; at FLT_MAX the largest decoded value, 6 * (448 * scale), is still finite.
  CHECK(nvfp4_tensor_scale(2688.0f) == 1.0f);
  CHECK(nvfp4_tensor_scale(0.0f) == 0x1p-120f);
  const float top = nvfp4_tensor_scale(std::numeric_limits<float>::max());
  volatile float largest = 6.0f * (448.0f * top);
  CHECK(std::isfinite(largest));
  // The block scale: 448 for the block holding abs_max, clamped to E4M3's smallest normal below.
  const float s = nvfp4_tensor_scale(100.0f);
  CHECK(nvfp4_block_scale<qsdp::e4m3, false>(100.0f, s) == 0x7E);
  CHECK(nvfp4_block_scale<qsdp::e4m3, true>(100.0f, s) == 0x7E);
  CHECK(nvfp4_block_scale<qsdp::e4m3, false>(0.0f, s) == 0x08);  // 2^-6
  CHECK(nvfp4_block_scale<qsdp::e4m3, false>(1e-30f, s) == 0x08);
  // Between E4M3's 1.0 (0x38) and 1.125 (0x39): nearest picks by distance, up always goes up.
  const float one = 6.0f;  // block abs_max 6 at tensor scale 1: wanted block scale 1
  CHECK(nvfp4_block_scale<qsdp::e4m3, false>(one, 1.0f) == 0x38);
  CHECK(nvfp4_block_scale<qsdp::e4m3, true>(one, 1.0f) == 0x38);
  CHECK(nvfp4_block_scale<qsdp::e4m3, false>(6.0f * 1.05f, 1.0f) == 0x38);
  CHECK(nvfp4_block_scale<qsdp::e4m3, true>(6.0f * 1.05f, 1.0f) == 0x39);
  CHECK(nvfp4_block_scale<qsdp::e4m3, false>(6.0f * 1.1f, 1.0f) == 0x39);
  // Rounding up keeps every value of the block within E2M1's range: no saturation.
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::uint32_t> any_bits(0x00800000u, 0x7F7FFFFFu);
  for (int i = 0; i < 20000; ++i) {
    const float a = std::bit_cast<float>(any_bits(rng));
    const float t = nvfp4_tensor_scale(std::max(a, std::bit_cast<float>(any_bits(rng))));
    const std::uint8_t b = nvfp4_block_scale<qsdp::e4m3, true>(a, t);
    if (b == 0x08 || b == 0x7E) continue;  // clamped: the bound does not apply
    CAPTURE(a);
    CAPTURE(t);
    CHECK(a * qsdp::detail::nvfp4_encode_factor<qsdp::e4m3>(t, b) <= 6.0f * (1.0f + 0x1p-21f));
  }
}

TEST_CASE("NVFP4 packets: the tensor scale after the header, NaN blocks, zeros, extremes") {
  qsdp::nvfp4<> p{};
  // 4096 values: 2048 code bytes, 256 scale bytes, the 16-byte tensor record, 32 bytes of flags.
  const std::size_t fixed = qsdp::compressed_size<float>(qsdp::mxfp4<>{}, 0);
  CHECK(qsdp::compressed_size<float>(p, 4096) - fixed >= 2048 + 256 + 16);
  CHECK(qsdp::compressed_size<float>(p, 4096) - fixed <= 2048 + 256 + 16 + 32 + 32);

  std::vector<float> x(64, 1.25f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[20] = std::numeric_limits<float>::infinity();
  x[40] = -3000.0f;
  for (std::size_t i = 48; i < 64; ++i) x[i] = 0.0f;
  x[50] = -0.0f;
  std::vector<std::byte> packet(qsdp::compressed_size<float>(p, x.size()));
  qsdp::encode(p, x.data(), x.size(), packet.data());
  const auto l = qsdp::detail::layout_for<qsdp::nvfp4<>, float>(p, x.size());
  CHECK(l.meta_offset == sizeof(qsdp::detail::packet_header) + 16);
  float record = 0;
  std::memcpy(&record, packet.data() + sizeof(qsdp::detail::packet_header), sizeof record);
  CHECK(record == 3000.0f / 2688.0f);               // the infinity does not enter it
  CHECK(packet[l.meta_offset] == std::byte{0x7F});  // E4M3's NaN byte for both flagged blocks
  CHECK(packet[l.meta_offset + 1] == std::byte{0x7F});
  CHECK(packet[l.meta_offset + 2] == std::byte{0x7E});  // 448: the block holding abs_max
  CHECK(packet[l.meta_offset + 3] == std::byte{0x08});  // the zeros: the smallest normal, 2^-6
  std::vector<float> y(x.size());
  qsdp::decode(p, packet.data(), x.size(), y.data());
  for (std::size_t i = 0; i < 32; ++i) CHECK(std::isnan(y[i]));
  CHECK(y[40] == -3000.0f);
  for (std::size_t i = 48; i < 64; ++i) CHECK(y[i] == 0.0f);
  CHECK(std::signbit(y[50]));

  // Another tensor scale in the record changes every decoded value by that factor.
  const float doubled = record * 2.0f;
  std::memcpy(packet.data() + sizeof(qsdp::detail::packet_header), &doubled, sizeof doubled);
  std::vector<float> z(x.size());
  qsdp::decode(p, packet.data(), x.size(), z.data());
  CHECK(z[40] == -6000.0f);
  CHECK(z[33] == 2.0f * y[33]);

  // All zeros, the smallest floats and the largest decode without NaN or overflow.
  for (float v : {0.0f, 1e-45f, 1e-38f, 3e38f, std::numeric_limits<float>::max()}) {
    CAPTURE(v);
    std::vector<float> in(48, v);
    for (std::size_t i = 0; i < in.size(); i += 3) in[i] = -v / 3.0f;
    const auto out = qsdp_test::round_trip(p, in);
    for (std::size_t i = 0; i < in.size(); ++i) {
      CHECK(std::isfinite(out[i]));
      CHECK(std::abs(static_cast<double>(out[i]) - in[i]) <=
            std::abs(static_cast<double>(in[i])) * 0.25 + 0x1p-126);
    }
  }

  // A packet of another policy is refused by name.
  std::vector<std::byte> mx(qsdp::compressed_size<float>(qsdp::mxfp4<>{}, x.size()));
  qsdp::encode(qsdp::mxfp4<>{}, x.data(), x.size(), mx.data());
  CHECK_THROWS_WITH_AS(qsdp::decode(p, mx.data(), x.size(), y.data()),
                       doctest::Contains("quantizer 'mxfp4'"), qsdp::error);
  CHECK_THROWS_WITH_AS(qsdp::decode(qsdp::mxfp4<>{}, packet.data(), x.size(), y.data()),
                       doctest::Contains("quantizer 'nvfp4'"), qsdp::error);
}

TEST_CASE("NVFP4 decode_accumulate adds the values decode stores, each packet at its own scale") {
  // A decoded value is rounded before it is added: a multiply-add fused across the inlined decode
  // (g++ does that where FMA is enabled, nvcc everywhere) would give other sums.
  const qsdp::nvfp4<> q{};
  const std::size_t count = 16 * 40 + 13, packets = 3;
  const std::size_t bytes = qsdp::compressed_size<float>(q, count);
  std::vector<std::byte> in(bytes * packets);
  std::vector<float> sum(count, 0.0f);
  for (std::size_t p = 0; p < packets; ++p) {
    auto x = qsdp_test::make_data(qsdp_test::distribution::mixed_scale, count,
                                  70 + static_cast<std::uint32_t>(p));
    for (float& v : x) v *= static_cast<float>(p + 1) * 0.37f;  // a tensor scale per packet
    qsdp::encode(q, x.data(), count, in.data() + p * bytes);
    std::vector<float> y(count);
    qsdp::decode(q, in.data() + p * bytes, count, y.data());
    for (std::size_t i = 0; i < count; ++i) sum[i] += y[i];
  }
  std::vector<float> acc(count, 0.0f);
  qsdp::decode_accumulate(q, in.data(), packets, count, acc.data());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < count; ++i)
    differing += std::bit_cast<std::uint32_t>(acc[i]) != std::bit_cast<std::uint32_t>(sum[i]);
  CHECK(differing == 0);
}

TEST_CASE("NVFP4 stochastic: on the neighbours of each value, unbiased over calls") {
  qsdp::nvfp4<qsdp::rounding::stochastic> g{.seed = 3};
  const auto x = qsdp_test::make_data(qsdp_test::distribution::normal, 512, 4);
  const qsdp::nvfp4<> nearest{};
  const auto n = qsdp_test::round_trip(nearest, x);
  std::vector<double> mean(x.size(), 0.0);
  const int calls = 2000;
  bool differs = false;
  std::vector<float> first;
  for (int c = 0; c < calls; ++c) {
    std::vector<std::byte> packet(qsdp::compressed_size<float>(g, x.size()));
    qsdp::encode(g, x.data(), x.size(), packet.data());
    std::vector<float> y(x.size());
    qsdp::decode(g, packet.data(), x.size(), y.data());
    if (c == 0) first = y;
    differs = differs || y != first;
    // The two neighbours of x[i]: element grid points of its block around x / scale.
    float tensor_scale = 0;
    std::memcpy(&tensor_scale, packet.data() + sizeof(qsdp::detail::packet_header), 4);
    const auto l = qsdp::detail::layout_for<decltype(g), float>(g, x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const auto block_scale = static_cast<std::uint8_t>(packet[l.meta_offset + i / 16]);
      const float unit = qsdp::detail::nvfp4_decode_factor<qsdp::e4m3>(tensor_scale, block_scale);
      const double scaled = std::abs(static_cast<double>(y[i]) / unit);
      const double want =
          std::abs(static_cast<double>(x[i]) *
                   qsdp::detail::nvfp4_encode_factor<qsdp::e4m3>(tensor_scale, block_scale));
      // Adjacent E2M1 magnitudes are at most 2 apart; the code is one of want's two neighbours.
      if (std::abs(scaled - want) >= 2.0 || (scaled > want && scaled > 6.0)) {
        CAPTURE(i);
        CHECK(std::abs(scaled - want) < 2.0);
      }
      mean[i] += y[i];
    }
  }
  CHECK(differs);
  double err = 0, err_nearest = 0, ref = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    err += std::pow(mean[i] / calls - x[i], 2);
    err_nearest += std::pow(static_cast<double>(n[i]) - x[i], 2);
    ref += std::pow(static_cast<double>(x[i]), 2);
  }
  // One call's error is about 0.1 of the data's norm (that of nearest, measured here); the mean of
  // 2000 calls shrinks like 1/sqrt(2000). A bias of 1 % of the values would stand out at 0.01.
  MESSAGE("rel. L2: nearest " << std::sqrt(err_nearest / ref) << ", mean of " << calls
                              << " stochastic calls " << std::sqrt(err / ref));
  CHECK(std::sqrt(err_nearest / ref) < 0.2);
  CHECK(std::sqrt(err / ref) < 0.006);
}

TEST_CASE("hadamard<nvfp4> decodes with the error of nvfp4 on rotated values") {
  qsdp::hadamard<qsdp::nvfp4<qsdp::rounding::stochastic>> g{{.bucket_size = 16, .seed = 1}};
  const auto x = qsdp_test::make_data(qsdp_test::distribution::gradient_with_outliers, 4100, 2);
  const auto y = qsdp_test::round_trip(g, x);
  const auto z = qsdp_test::round_trip(qsdp::nvfp4<qsdp::rounding::stochastic>{.seed = 1}, x);
  double err_rotated = 0, err_plain = 0, ref = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    err_rotated += std::pow(static_cast<double>(y[i]) - x[i], 2);
    err_plain += std::pow(static_cast<double>(z[i]) - x[i], 2);
    ref += std::pow(static_cast<double>(x[i]), 2);
  }
  MESSAGE("rel. L2: nvfp4 stochastic " << std::sqrt(err_plain / ref) << ", rotated "
                                       << std::sqrt(err_rotated / ref));
  CHECK(std::sqrt(err_rotated / ref) < 0.3);
  CHECK(std::sqrt(err_plain / ref) < 0.3);
  // The rotated packet: header, rotation record, tensor record, then the block scales.
  const auto l = qsdp::detail::layout_for<decltype(g), float>(g, x.size());
  CHECK(l.meta_offset == sizeof(qsdp::detail::packet_header) + 32);
}

namespace {

// Inputs that reach every branch of the block-scaled encode: mixed magnitudes over many binades,
// then blocks of float subnormals, of signed zeros, of magnitudes at FLT_MAX, of exact ties
// between elements, one block with NaN and one with infinity.
std::vector<float> block_scaled_path_inputs(std::size_t n) {
  auto x = qsdp_test::make_data(qsdp_test::distribution::mixed_scale, n, 31);
  for (std::size_t i = 0; i < 64; ++i) {
    x[i] = std::ldexp(static_cast<float>(i % 7) - 3.0f, -140 + static_cast<int>(i % 9));
    x[64 + i] = i % 2 ? -0.0f : 0.0f;
    x[128 + i] = (i % 2 ? -1.0f : 1.0f) *
                 std::nextafter(std::numeric_limits<float>::max(), static_cast<float>(i % 3));
    x[192 + i] = (static_cast<float>(i % 13) + 0.5f) * 0.25f;  // ties at every element spacing
  }
  x[300] = std::numeric_limits<float>::quiet_NaN();
  x[400] = -std::numeric_limits<float>::infinity();
  return x;
}

template <class T, class Q>
void check_block_scaled_paths(const Q& q, const std::vector<float>& values) {
  const auto x = qsdp_test::convert<T>(values);
  const std::size_t size = qsdp::compressed_size<T>(q, x.size());
  struct run_result {
    std::vector<std::byte> packet;
    std::vector<T> decoded;
    std::vector<float> acc;
  };
  const auto run = [&] {
    run_result r{std::vector<std::byte>(size), std::vector<T>(x.size()), values};
    Q local = q;
    qsdp::encode(local, x.data(), x.size(), r.packet.data());
    qsdp::decode(local, r.packet.data(), x.size(), r.decoded.data());
    for (float& a : r.acc) a = std::isfinite(a) ? a * 0.5f : 1.0f;  // sums that round
    qsdp::decode_accumulate(local, r.packet.data(), x.size(), r.acc.data());
    return r;
  };
  const run_result fast = run();
  qsdp::detail::host_force_baseline = true;
  const run_result base = run();
  qsdp::detail::host_force_baseline = false;
  INFO(std::string(qsdp::policy_name<Q>())
       << " bucket " << q.bucket_size << ", " << sizeof(T) << "-byte values");
  REQUIRE(fast.packet == base.packet);
  REQUIRE(std::memcmp(fast.decoded.data(), base.decoded.data(), x.size() * sizeof(T)) == 0);
  REQUIRE(std::memcmp(fast.acc.data(), base.acc.data(), x.size() * sizeof(float)) == 0);
}

template <class T>
void check_block_scaled_paths_for(const std::vector<float>& x) {
  using qsdp::rounding;
  // 32 and 16: the formats' blocks; 7: segments that start inside a Philox block; 40 and 100:
  // remainders after whole groups of 32; 4096: two segments per block.
  for (const std::size_t bucket : {std::size_t{32}, std::size_t{16}, std::size_t{7},
                                   std::size_t{40}, std::size_t{100}, std::size_t{4096}}) {
    check_block_scaled_paths<T>(qsdp::mxfp8<qsdp::e4m3>{.bucket_size = bucket}, x);
    check_block_scaled_paths<T>(
        qsdp::mxfp8<qsdp::e4m3, rounding::stochastic>{.bucket_size = bucket, .seed = 3}, x);
    check_block_scaled_paths<T>(qsdp::mxfp8<qsdp::e5m2>{.bucket_size = bucket}, x);
    check_block_scaled_paths<T>(
        qsdp::mxfp8<qsdp::e5m2, rounding::stochastic>{.bucket_size = bucket, .seed = 3}, x);
    check_block_scaled_paths<T>(qsdp::mxfp6<qsdp::e3m2>{.bucket_size = bucket}, x);
    check_block_scaled_paths<T>(
        qsdp::mxfp6<qsdp::e3m2, rounding::stochastic>{.bucket_size = bucket, .seed = 3}, x);
    check_block_scaled_paths<T>(qsdp::mxfp6<qsdp::e2m3>{.bucket_size = bucket}, x);
    check_block_scaled_paths<T>(
        qsdp::mxfp6<qsdp::e2m3, rounding::stochastic>{.bucket_size = bucket, .seed = 3}, x);
    check_block_scaled_paths<T>(qsdp::mxfp4<>{.bucket_size = bucket}, x);
    check_block_scaled_paths<T>(qsdp::mxfp4<rounding::stochastic>{.bucket_size = bucket, .seed = 3},
                                x);
    check_block_scaled_paths<T>(qsdp::nvfp4<>{.bucket_size = bucket}, x);
    check_block_scaled_paths<T>(qsdp::nvfp4<rounding::stochastic>{.bucket_size = bucket, .seed = 3},
                                x);
  }
  check_block_scaled_paths<T>(
      qsdp::hadamard<qsdp::mxfp4<rounding::stochastic>>{{.bucket_size = 32, .seed = 5}}, x);
  check_block_scaled_paths<T>(qsdp::hadamard<qsdp::mxfp8<>>{{.bucket_size = 64}, 5}, x);
  check_block_scaled_paths<T>(
      qsdp::hadamard<qsdp::nvfp4<rounding::stochastic>>{{.bucket_size = 16, .seed = 5}}, x);
}

}  // namespace

TEST_CASE(
    "MX and NVFP4: the vectorized and baseline host paths give bit-identical packets and "
    "values") {
  INFO("host path: " << std::string(qsdp::detail::host_codec_isa()));
  const auto x = block_scaled_path_inputs(5003);
  check_block_scaled_paths_for<float>(x);
  check_block_scaled_paths_for<double>(x);
#if QSDP_HAS_CUDA_HALF
  check_block_scaled_paths_for<__half>(x);
  check_block_scaled_paths_for<__nv_bfloat16>(x);
#endif
}

TEST_SUITE_END();
