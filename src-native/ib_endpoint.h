// IbEndpoint, the JS class of the IB transport: rdma_cm connection management and one RC queue
// pair per connection, with send and receive rings in one registered buffer that JavaScript reads
// and writes directly. All protocol logic lives in TypeScript; this only moves work requests,
// completions and connection events across the boundary.
//
// Threading: everything runs on the Node main thread. The rdma_cm event channel and each
// connection's completion channel are non-blocking fds watched with uv_poll.
//
// Lifetimes: every verbs, rdma_cm and uv resource has an owner (ib_handles.h) inside the structure
// it belongs to (ib_conn.h); destroying a connection is erasing it from the table, and closing the
// endpoint is dropping its Resources.
#ifndef RDS_NATIVE_IB_ENDPOINT_H_
#define RDS_NATIVE_IB_ENDPOINT_H_

#include <napi.h>
#include <uv.h>
#include <memory>
#include <unordered_map>
#include <vector>
#include "ib_conn.h"

namespace rds_native {

// The process-exit hook of an endpoint (napi_add_env_cleanup_hook), removed when the endpoint
// closes first.
class EnvCleanupHook {
 public:
  EnvCleanupHook() = default;
  EnvCleanupHook(const EnvCleanupHook&) = delete;
  EnvCleanupHook& operator=(const EnvCleanupHook&) = delete;
  ~EnvCleanupHook() { Remove(); }
  void Add(napi_env env, void (*fn)(void*), void* arg) {
    Remove();
    if (napi_add_env_cleanup_hook(env, fn, arg) != napi_ok) return;
    env_ = env;
    fn_ = fn;
    arg_ = arg;
  }
  void Remove() {
    if (fn_ != nullptr) napi_remove_env_cleanup_hook(env_, fn_, arg_);
    fn_ = nullptr;
  }

 private:
  napi_env env_ = nullptr;
  void (*fn_)(void*) = nullptr;
  void* arg_ = nullptr;
};

class Endpoint : public Napi::ObjectWrap<Endpoint> {
 public:
  static Napi::Function Define(Napi::Env env);

  // new IbEndpoint(onCmEvent(id, event, status, privateData?, info?), onCompletions(id, Int32Array))
  explicit Endpoint(const Napi::CallbackInfo& info);
  ~Endpoint() override { Shutdown(); }

 private:
  // What the endpoint owns. Connections go first (their cm ids report on the channel, which
  // rdma_destroy_event_channel wants empty), then the application's regions, then the channel's
  // poll and the channel.
  struct Resources {
    EventChannel channel;
    UvHandle<uv_poll_t> channelPoll;
    std::unordered_map<uint32_t, std::unique_ptr<Mr>> mrs;
    std::unordered_map<uint32_t, std::unique_ptr<Conn>> conns;
  };

  // ib_endpoint.cc: connection management.
  Napi::Value Listen(const Napi::CallbackInfo& info);
  Napi::Value Connect(const Napi::CallbackInfo& info);
  Napi::Value RdmaConnect(const Napi::CallbackInfo& info);
  Napi::Value Accept(const Napi::CallbackInfo& info);
  Napi::Value Reject(const Napi::CallbackInfo& info);
  Napi::Value Disconnect(const Napi::CallbackInfo& info);
  Napi::Value Destroy(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value Ref(const Napi::CallbackInfo& info);
  Napi::Value Unref(const Napi::CallbackInfo& info);
  // ib_rings.cc: the queue pair and its send and receive rings.
  Napi::Value SetupQp(const Napi::CallbackInfo& info);
  Napi::Value PostSend(const Napi::CallbackInfo& info);
  Napi::Value PostRecv(const Napi::CallbackInfo& info);
  // ib_rdma.cc: memory regions and RDMA ops.
  Napi::Value RegMr(const Napi::CallbackInfo& info);
  Napi::Value DeregMr(const Napi::CallbackInfo& info);
  Napi::Value PostRdma(const Napi::CallbackInfo& info);
  Napi::Value PollOps(const Napi::CallbackInfo& info);

  void DrainCm();
  void DrainCq(Conn* c);
  // One work request of an RDMA op completed (ib_rdma.cc).
  void OpCompleted(Conn* c, const ibv_wc& wc, std::vector<int32_t>& batch);

  Conn* NewConn(CmId cm);
  Conn* Find(const Napi::CallbackInfo& info);
  Conn* FindOrThrow(const Napi::CallbackInfo& info);
  // Frees everything the connection holds (its destructor) and forgets its id.
  void Drop(Conn* c) { res_.conns.erase(c->id); }
  // The device's PD, allocated on first use and shared while anyone holds it.
  std::shared_ptr<Pd> AcquirePd(ibv_context* ctx);
  // close() and process exit: disconnect what is connected, then release everything.
  void Shutdown();
  static void AtExit(void* self) { static_cast<Endpoint*>(self)->Shutdown(); }

  Napi::Env env_;
  uv_loop_t* loop_ = nullptr;
  bool referenced_ = true;
  Napi::FunctionReference onCm_;
  Napi::FunctionReference onCq_;
  uint32_t nextId_ = 1;
  uint32_t nextMr_ = 1;
  std::unordered_map<ibv_context*, std::weak_ptr<Pd>> pds_;
  EnvCleanupHook cleanup_;
  Resources res_;
};

}  // namespace rds_native

#endif  // RDS_NATIVE_IB_ENDPOINT_H_
