// What an IB endpoint holds: protection domains, application memory regions, RDMA ops and
// connections. Each is a structure of owners (ib_handles.h) whose member order is its teardown
// order: C++ destroys members last-declared first, so every member is declared before the ones
// that depend on it.
#ifndef RDS_NATIVE_IB_CONN_H_
#define RDS_NATIVE_IB_CONN_H_

#include <napi.h>
#include <uv.h>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>
#include "ib_handles.h"

namespace rds_native {

class Endpoint;

// One protection domain per device (verbs context), shared by every connection and memory region
// on it: a region the application exposes must be usable by whichever queue pair the peer's RDMA
// op arrives on. Held through shared_ptr by its users; the last one releases it. `anchor` is an
// rdma_cm id bound to the device, kept while the PD lives so the device context librdmacm opened
// stays open even when no connection uses it; it goes after the PD.
struct Pd {
  ibv_context* ctx = nullptr;
  CmId anchor;
  ProtectionDomain pd;
};

// An application memory region (RDS_GET_MR): the registration, then the JS memory it pins, then
// its reference on the PD (a PD with regions on it cannot be deallocated).
struct Mr {
  std::shared_ptr<Pd> pd;
  Napi::ObjectReference mem;
  MemoryRegion mr;
};

// One RDMA READ/WRITE posted on a connection: its work requests, and the local memory registered
// for as long as they run (deregistered before the memory is let go).
struct RdmaOp {
  uint32_t tag = 0;
  uint32_t remaining = 0;  // work requests not yet completed
  uint32_t bytes = 0;
  bool reported = false;
  std::vector<Napi::ObjectReference> mem;
  std::vector<MemoryRegion> mrs;
};

// An op's work requests carry its tag with this bit set (slots never have it).
constexpr uint64_t kOpWr = 1ull << 32;
// Send-queue entries kept beyond the rings for RDMA work requests.
constexpr uint32_t kRdmaWrs = 256;
// The most scatter/gather entries one RDMA work request takes (the kernel's RDS_IB_MAX_SGE).
constexpr uint32_t kMaxSge = 8;

// One rdma_cm id: a listener, or a connection with (after SetupQp) its QP, CQ and rings.
// Destruction runs bottom-up: the completion poll stops, then the QP goes (rdma_destroy_id needs
// it gone and all its events acked, which DrainCm always does at once), then the CQ and its
// channel; with the QP gone no op's work request can still touch its local memory, so the ops and
// the ring's registration follow, then the PD reference and last the id.
struct Conn {
  Conn(Endpoint* owner, uint32_t connId, CmId id) : ep(owner), id(connId), cm(std::move(id)) {
    if (cm) cm->context = this;
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  // Whether it has a queue pair (connected, or connecting with one).
  bool HasQp() const { return static_cast<bool>(qp); }

  Endpoint* const ep;
  const uint32_t id;
  bool listener = false;
  uint32_t maxSge = 1;
  bool atomics = false;  // the device does 64-bit FADD/CSWP (atomic_cap != IBV_ATOMIC_NONE)
  uint32_t rdmaWrs = 0;  // RDMA work requests outstanding (at most kRdmaWrs)
  uint32_t slots = 0;
  uint32_t slotSize = 0;

  CmId cm;
  Napi::Reference<Napi::Buffer<uint8_t>> ring;  // keeps the registered memory alive while in use
  std::shared_ptr<Pd> pd;
  MemoryRegion ringMr;
  std::unordered_map<uint32_t, std::unique_ptr<RdmaOp>> ops;
  CompChannel cc;
  CompQueue cq;
  CmQp qp;
  UvHandle<uv_poll_t> poll;
};

}  // namespace rds_native

#endif  // RDS_NATIVE_IB_CONN_H_
