// InfiniBand / RoCE for the RDS IB transport, the module's entry: IbEndpoint (ib_endpoint.h) and
// three device queries. The rest of the addon's IB side:
//   ib_api.*       libibverbs and librdmacm loaded with dlopen on first use
//   ib_handles.h   owners (RAII) for verbs, rdma_cm and uv resources
//   ib_conn.h      what an endpoint holds: PDs, memory regions, RDMA ops, connections
//   ib_endpoint.*  the endpoint: events, completions, connection management
//   ib_rings.cc    a connection's queue pair and its send/receive rings
//   ib_rdma.cc     application memory regions and RDMA ops
#include <napi.h>
#include "ib_endpoint.h"
#include "ib_util.h"

namespace rds_native {

namespace {

// ibLoad() -> null, or the reason rdma-core cannot be used.
Napi::Value IbLoad(const Napi::CallbackInfo& info) {
  if (LoadApi()) return info.Env().Null();
  return Napi::String::New(info.Env(), IbApiError());
}

// An rdma_cm id (no event channel: synchronous) bound to the IPv4 address: it carries the device
// that owns the address, or none. Empty if the address does not parse or rdma-core is missing.
CmId BoundId(const Napi::CallbackInfo& info) {
  sockaddr_in sin;
  if (!LoadApi() || info.Length() < 1 || !info[0].IsString() || !ParseIpv4(info[0].As<Napi::String>(), 0, &sin))
    return nullptr;
  rdma_cm_id* raw;
  if (api.create_id(nullptr, &raw, nullptr, RDMA_PS_TCP) != 0) return nullptr;
  CmId cm(raw);
  if (api.bind_addr(raw, reinterpret_cast<sockaddr*>(&sin)) != 0 || raw->verbs == nullptr) return nullptr;
  return cm;
}

// ibDeviceFor(ipv4) -> name of the RDMA device that owns the address, or null (the kernel's
// rds_ib_laddr_check: bind an rdma_cm id to it and see whether a device came with it).
Napi::Value IbDeviceFor(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CmId cm = BoundId(info);
  if (!cm) return env.Null();
  return Napi::String::New(env, api.get_device_name(cm->verbs->device));
}

// ibAtomics(ipv4) -> whether the RDMA device owning the address does 64-bit atomics (FADD, CSWP).
Napi::Value IbAtomics(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CmId cm = BoundId(info);
  ibv_device_attr da;
  bool yes = cm && api.query_device(cm->verbs, &da) == 0 && da.atomic_cap != IBV_ATOMIC_NONE;
  return Napi::Boolean::New(env, yes);
}

}  // namespace

void InitIb(Napi::Env env, Napi::Object exports) {
  exports.Set("IbEndpoint", Endpoint::Define(env));
  exports.Set("ibLoad", Napi::Function::New(env, IbLoad, "ibLoad"));
  exports.Set("ibDeviceFor", Napi::Function::New(env, IbDeviceFor, "ibDeviceFor"));
  exports.Set("ibAtomics", Napi::Function::New(env, IbAtomics, "ibAtomics"));
}

}  // namespace rds_native
