// expect: qsdp::hadamard<Inner>: Inner must be a quantizer policy
#include <qsdp/codec.hpp>

int main() {
  qsdp::hadamard<qsdp::identity> h{};
  return static_cast<int>(qsdp::compressed_size<float>(h, 10));
}
