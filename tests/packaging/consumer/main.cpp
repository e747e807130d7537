// Downstream smoke test: encode and decode a small vector through the public
// API of an installed / embedded qsdp.
#include <qsdp/codec.hpp>
#include <qsdp/quantizers.hpp>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <vector>

int main() {
  qsdp::uniform<8> q{.bucket_size = 64};

  std::vector<float> x(1000);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(i) * 0.01f;
  }

  std::vector<std::byte> p(qsdp::compressed_size<float>(q, x.size()));
  qsdp::encode(q, x.data(), x.size(), p.data());

  std::vector<float> y(x.size());
  qsdp::decode(q, p.data(), x.size(), y.data());

  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!(std::fabs(y[i] - x[i]) <= 0.01f)) {
      std::fprintf(stderr, "qsdp consumer: mismatch at %zu: x=%g y=%g\n", i,
                   static_cast<double>(x[i]), static_cast<double>(y[i]));
      return 1;
    }
  }
  std::printf("qsdp consumer: %zu values round-tripped through %zu bytes\n", x.size(), p.size());
  return 0;
}
