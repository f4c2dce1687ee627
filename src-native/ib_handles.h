// Owners for the rdma-core objects and libuv handles of the IB transport: each releases its object
// when it goes out of scope, so a structure that holds them is torn down by its destructor, in the
// reverse order of its members (zeromq.js's UvHandle/UvDeleter is the model for the uv side).
#ifndef RDS_NATIVE_IB_HANDLES_H_
#define RDS_NATIVE_IB_HANDLES_H_

#include <uv.h>
#include <cstdlib>
#include <memory>
#include "ib_api.h"

namespace rds_native {

// Calls one of rdma-core's destroy functions (a member of Api, resolved at run time) on the object.
template <typename T, auto Destroy>
struct ApiDeleter {
  void operator()(T* p) const { (api.*Destroy)(p); }
};

template <typename T, auto Destroy>
using ApiHandle = std::unique_ptr<T, ApiDeleter<T, Destroy>>;

using CmId = ApiHandle<rdma_cm_id, &Api::destroy_id>;
using EventChannel = ApiHandle<rdma_event_channel, &Api::destroy_event_channel>;
using ProtectionDomain = ApiHandle<ibv_pd, &Api::dealloc_pd>;
using MemoryRegion = ApiHandle<ibv_mr, &Api::dereg_mr>;
using CompChannel = ApiHandle<ibv_comp_channel, &Api::destroy_comp_channel>;
using CompQueue = ApiHandle<ibv_cq, &Api::destroy_cq>;
// The QP rdma_create_qp made on an id: it is reached through (and must die before) that id, so
// this holds the id without owning it and destroys only its QP.
using CmQp = ApiHandle<rdma_cm_id, &Api::destroy_qp>;

// A libuv handle closed with uv_close, and freed in the close callback (uv may still touch it
// until then). Only initialised handles are given to it.
template <typename T>
struct UvDeleter {
  void operator()(T* h) const {
    uv_close(reinterpret_cast<uv_handle_t*>(h), [](uv_handle_t* closed) { delete reinterpret_cast<T*>(closed); });
  }
};

template <typename T>
using UvHandle = std::unique_ptr<T, UvDeleter<T>>;

// A uv_poll_t watching fd for readability, calling onReadable(data); empty if uv refused the fd.
inline UvHandle<uv_poll_t> PollReadable(uv_loop_t* loop, int fd, void* data, uv_poll_cb onReadable) {
  auto* raw = new uv_poll_t;
  if (uv_poll_init(loop, raw, fd) != 0) {
    delete raw;  // never initialised: nothing for uv_close to do
    return nullptr;
  }
  UvHandle<uv_poll_t> poll(raw);
  poll->data = data;
  if (uv_poll_start(raw, UV_READABLE, onReadable) != 0) return nullptr;
  return poll;
}

inline void SetHandleRef(uv_poll_t* h, bool ref) {
  if (h == nullptr) return;
  if (ref) uv_ref(reinterpret_cast<uv_handle_t*>(h));
  else uv_unref(reinterpret_cast<uv_handle_t*>(h));
}

// Memory from posix_memalign until its ownership passes to a JS Buffer.
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedMem = std::unique_ptr<uint8_t, FreeDeleter>;

}  // namespace rds_native

#endif  // RDS_NATIVE_IB_HANDLES_H_
