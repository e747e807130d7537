// expect: qsdp::uniform<B>: B \(bits per value\) must be 1\.\.8
#include <qsdp/quantizers.hpp>

int main() {
  qsdp::uniform<9> q{};
  return static_cast<int>(q.bucket_size);
}
