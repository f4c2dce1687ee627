// The rdma-core entry points the IB transport uses, looked up with dlsym (see ib_api.h).
#include <dlfcn.h>
#include "ib_api.h"

namespace rds_native {

Api api;

namespace {

bool apiLoaded = false;
std::string apiError;

template <typename T>
bool Sym(void* lib, const char* name, T& out) {
  out = reinterpret_cast<T>(dlsym(lib, name));
  if (out == nullptr) apiError = std::string("missing symbol ") + name;
  return out != nullptr;
}

}  // namespace

const std::string& IbApiError() { return apiError; }

bool LoadApi() {
  if (apiLoaded) return true;
  if (!apiError.empty()) return false;
  void* verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (verbs == nullptr) {
    apiError = dlerror();
    return false;
  }
  void* cm = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (cm == nullptr) {
    apiError = dlerror();
    return false;
  }
  bool ok =
      Sym(cm, "rdma_create_event_channel", api.create_event_channel) &&
      Sym(cm, "rdma_destroy_event_channel", api.destroy_event_channel) && Sym(cm, "rdma_create_id", api.create_id) &&
      Sym(cm, "rdma_destroy_id", api.destroy_id) && Sym(cm, "rdma_bind_addr", api.bind_addr) &&
      Sym(cm, "rdma_resolve_addr", api.resolve_addr) && Sym(cm, "rdma_resolve_route", api.resolve_route) &&
      Sym(cm, "rdma_create_qp", api.create_qp) && Sym(cm, "rdma_destroy_qp", api.destroy_qp) &&
      Sym(cm, "rdma_connect", api.connect) && Sym(cm, "rdma_listen", api.listen) &&
      Sym(cm, "rdma_accept", api.accept) && Sym(cm, "rdma_reject", api.reject) &&
      Sym(cm, "rdma_disconnect", api.disconnect) && Sym(cm, "rdma_get_cm_event", api.get_cm_event) &&
      Sym(cm, "rdma_ack_cm_event", api.ack_cm_event) && Sym(cm, "rdma_event_str", api.event_str) &&
      Sym(verbs, "ibv_alloc_pd", api.alloc_pd) && Sym(verbs, "ibv_dealloc_pd", api.dealloc_pd) &&
      Sym(verbs, "ibv_reg_mr", api.reg_mr) && Sym(verbs, "ibv_dereg_mr", api.dereg_mr) &&
      Sym(verbs, "ibv_create_comp_channel", api.create_comp_channel) &&
      Sym(verbs, "ibv_destroy_comp_channel", api.destroy_comp_channel) && Sym(verbs, "ibv_create_cq", api.create_cq) &&
      Sym(verbs, "ibv_destroy_cq", api.destroy_cq) && Sym(verbs, "ibv_get_cq_event", api.get_cq_event) &&
      Sym(verbs, "ibv_ack_cq_events", api.ack_cq_events) && Sym(verbs, "ibv_get_device_name", api.get_device_name);
  ok = ok && Sym(verbs, "ibv_query_device", api.query_device);
  api.reg_mr_iova = reinterpret_cast<decltype(api.reg_mr_iova)>(dlsym(verbs, "ibv_reg_mr_iova"));
  api.set_option = reinterpret_cast<decltype(api.set_option)>(dlsym(cm, "rdma_set_option"));
  apiLoaded = ok;
  return ok;
}

}  // namespace rds_native
