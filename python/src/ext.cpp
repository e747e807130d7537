// SPDX-License-Identifier: Apache-2.0
//
// The qsdp._ext module: qsdp::python::policy and group_communicator as Python classes, qsdp::error
// as qsdp.Error (a RuntimeError), the same messages as in C++.
#include "ext.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <cstring>

#include "policy_impl.hpp"

namespace qsdp::python {

group_communicator::group_communicator(int rank, int size, nb::callable all_gather,
                                       nb::callable all_to_all)
    : rank_(rank),
      size_(size),
      all_gather_(std::move(all_gather)),
      all_to_all_(std::move(all_to_all)) {
  check_group_shape(rank, size);
}

namespace {

/// A uint8 torch tensor viewing n bytes at `data` (no copy, no owner: valid during the call).
nb::object byte_view(const std::byte* data, std::size_t n) {
  using view = nb::ndarray<nb::pytorch, std::uint8_t, nb::ndim<1>, nb::device::cpu>;
  const std::size_t shape[1] = {n};
  return nb::cast(view(const_cast<std::byte*>(data), 1, shape, nb::handle()),
                  nb::rv_policy::reference);
}

/// `send` itself, or a copy of it when it lies inside `recv` (the collectives gather in place; the
/// torch collectives take no overlapping buffers).
const std::byte* outside(const std::byte* send, std::size_t n, const std::byte* recv,
                         std::size_t recv_bytes, host_workspace& copy) {
  if (n == 0 || send + n <= recv || send >= recv + recv_bytes) return send;
  std::byte* c = copy.get(n);
  std::memcpy(c, send, n);
  return c;
}

}  // namespace

void group_communicator::all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
  const std::size_t total = n * static_cast<std::size_t>(size_);
  send = outside(send, n, recv, total, in_place_);
  all_gather_(byte_view(send, n), byte_view(recv, total));
}

void group_communicator::all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
  const std::size_t total = n * static_cast<std::size_t>(size_);
  send = outside(send, total, recv, total, in_place_);
  all_to_all_(byte_view(send, total), byte_view(recv, total));
}

delta_holder::any_gather delta_holder::make(element e, std::size_t count, int world) {
  return with_element(e, [&]<class T>() {
    return any_gather(std::in_place_type<qsdp::delta_gather<T>>, count, world);
  });
}

delta_holder::delta_holder(element e, std::size_t count, int world)
    : type_(e), gather_(make(e, count, world)) {}

std::size_t delta_holder::count() const {
  return std::visit([](const auto& d) { return d.count(); }, gather_);
}
std::uint64_t delta_holder::calls() const {
  return std::visit([](const auto& d) { return d.calls(); }, gather_);
}
std::size_t delta_holder::memory_bytes() const {
  return std::visit([](const auto& d) { return d.memory_bytes(); }, gather_);
}
void delta_holder::reset() {
  std::visit([](auto& d) { d.reset(); }, gather_);
}

std::unique_ptr<policy> make_identity() {
  return std::make_unique<policy_impl<qsdp::identity>>(qsdp::identity{});
}

std::unique_ptr<policy> make_policy(const std::string& family, int bits, std::size_t bucket_size,
                                    std::uint64_t seed, bool rotated) {
  static constexpr family_factories<policy> factories{make_stochastic, make_uniform, make_symmetric,
                                                      make_random_shift, make_identity};
  return make_named(factories, family, bits, bucket_size, seed, rotated);
}

}  // namespace qsdp::python

namespace {

using qsdp::python::address;
using qsdp::python::bytes;
using qsdp::python::delta_holder;
using qsdp::python::element;
using qsdp::python::gate;
using qsdp::python::group_communicator;
using qsdp::python::policy;
using qsdp::python::reduce_op_from;

}  // namespace

NB_MODULE(_ext, m) {
  namespace nb = nanobind;
  m.doc() = "qsdp's C++ codec and collectives for qsdp.torch (internal; use qsdp.torch)";
  nb::exception<qsdp::error>(m, "Error", PyExc_RuntimeError);
  m.attr("has_half_types") = bool(QSDP_HAS_CUDA_HALF);
  m.attr("host_codec_isa") = qsdp::host_codec_isa();
  // Whether qsdp._ext_cuda was built, and if not why (python/CMakeLists.txt).
  m.attr("cuda_extension") = QSDP_PYTHON_CUDA_EXTENSION;
  m.attr("recommended_min_compressed_bytes") = qsdp::recommended_min_compressed_bytes;

  nb::class_<group_communicator>(m, "GroupCommunicator")
      .def(nb::init<int, int, nb::callable, nb::callable>(), nb::arg("rank"), nb::arg("size"),
           nb::arg("all_gather"), nb::arg("all_to_all"))
      .def_prop_ro("rank", &group_communicator::rank)
      .def_prop_ro("size", &group_communicator::size)
      .def_prop_ro("calls", &group_communicator::calls)
      .def("group_start", [](group_communicator& c) { qsdp::group_start(c); })
      .def("group_end", [](group_communicator& c) { qsdp::group_end(c); })
      .def_prop_ro("counters", [](group_communicator& c) {
        const qsdp::call_counters& n = c.workspace().counters;
        return nb::make_tuple(n.compressed_calls, n.compressed_bytes, n.gated_calls, n.gated_bytes);
      });

  nb::class_<policy>(m, "Policy")
      .def_prop_ro("name", &policy::name)
      .def_prop_ro("bucket_size", &policy::bucket_size)
      .def_prop_ro("next_call", &policy::next_call)
      .def("take_call", &policy::take_call)
      .def("compressed_size",
           [](const policy& p, int e, std::size_t count) {
             return p.compressed_size(static_cast<element>(e), count);
           })
      .def("encode",
           [](policy& p, int e, std::uintptr_t src, std::size_t count, std::uintptr_t packet) {
             p.encode(static_cast<element>(e), address(src), count, bytes(packet));
           })
      .def("decode",
           [](policy& p, int e, std::uintptr_t packet, std::size_t count, std::uintptr_t dst) {
             p.decode(static_cast<element>(e), bytes(packet), count, address(dst));
           })
      .def("all_gather",
           [](policy& p, group_communicator& comm, int e, std::uintptr_t send, std::uintptr_t recv,
              std::size_t count, std::size_t min_compressed_bytes) {
             p.all_gather(comm, static_cast<element>(e), address(send), address(recv), count,
                          gate(min_compressed_bytes));
           })
      .def("reduce_scatter",
           [](policy& p, group_communicator& comm, int e, std::uintptr_t send, std::uintptr_t recv,
              std::size_t count, int op, std::size_t min_compressed_bytes) {
             p.reduce_scatter(comm, static_cast<element>(e), address(send), address(recv), count,
                              reduce_op_from(op), gate(min_compressed_bytes));
           })
      .def("all_reduce",
           [](policy& p, group_communicator& comm, int e, std::uintptr_t data, std::size_t count,
              int op, std::size_t min_compressed_bytes) {
             p.all_reduce(comm, static_cast<element>(e), address(data), count, reduce_op_from(op),
                          gate(min_compressed_bytes));
           })
      .def("delta_all_gather", [](policy& p, delta_holder& gather, group_communicator& comm,
                                  std::uintptr_t send, std::uintptr_t recv) {
        p.delta_all_gather(gather, comm, address(send), address(recv));
      });

  nb::class_<delta_holder>(m, "DeltaGather")
      .def("__init__",
           [](delta_holder* self, int e, std::size_t count, int world) {
             new (self) delta_holder(static_cast<element>(e), count, world);
           })
      .def_prop_ro("count", &delta_holder::count)
      .def_prop_ro("calls", &delta_holder::calls)
      .def_prop_ro("memory_bytes", &delta_holder::memory_bytes)
      .def("reset", &delta_holder::reset);

  m.def("make_policy", &qsdp::python::make_policy, nb::arg("family"), nb::arg("bits"),
        nb::arg("bucket_size"), nb::arg("seed"), nb::arg("rotated"));
}
