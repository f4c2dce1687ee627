// libibverbs and librdmacm, resolved by name with dlopen on first use (never linked), so the
// package loads and TCP works on hosts without rdma-core.
#ifndef RDS_NATIVE_IB_API_H_
#define RDS_NATIVE_IB_API_H_

#include <string>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

namespace rds_native {

struct Api {
  rdma_event_channel* (*create_event_channel)();
  void (*destroy_event_channel)(rdma_event_channel*);
  int (*create_id)(rdma_event_channel*, rdma_cm_id**, void*, rdma_port_space);
  int (*destroy_id)(rdma_cm_id*);
  int (*bind_addr)(rdma_cm_id*, sockaddr*);
  int (*resolve_addr)(rdma_cm_id*, sockaddr*, sockaddr*, int);
  int (*resolve_route)(rdma_cm_id*, int);
  int (*create_qp)(rdma_cm_id*, ibv_pd*, ibv_qp_init_attr*);
  void (*destroy_qp)(rdma_cm_id*);
  int (*connect)(rdma_cm_id*, rdma_conn_param*);
  int (*listen)(rdma_cm_id*, int);
  int (*accept)(rdma_cm_id*, rdma_conn_param*);
  int (*reject)(rdma_cm_id*, const void*, uint8_t);
  int (*disconnect)(rdma_cm_id*);
  int (*get_cm_event)(rdma_event_channel*, rdma_cm_event**);
  int (*ack_cm_event)(rdma_cm_event*);
  const char* (*event_str)(rdma_cm_event_type);
  ibv_pd* (*alloc_pd)(ibv_context*);
  int (*dealloc_pd)(ibv_pd*);
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int);
  int (*dereg_mr)(ibv_mr*);
  ibv_comp_channel* (*create_comp_channel)(ibv_context*);
  int (*destroy_comp_channel)(ibv_comp_channel*);
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int);
  int (*destroy_cq)(ibv_cq*);
  int (*get_cq_event)(ibv_comp_channel*, ibv_cq**, void**);
  void (*ack_cq_events)(ibv_cq*, unsigned int);
  const char* (*get_device_name)(ibv_device*);
  int (*query_device)(ibv_context*, ibv_device_attr*);
  // rdma-core 25+ (libibverbs 1.8): registration at a chosen I/O virtual address. Optional: without
  // it the transport still moves messages, only RDMA memory registration is refused.
  ibv_mr* (*reg_mr_iova)(ibv_pd*, void*, size_t, uint64_t, int);
  // rdma_set_option (RDMA_OPTION_ID_TOS: a connection's type of service, before route resolution).
  // Optional: without it only TOS 0 (the default service type) can be connected.
  int (*set_option)(rdma_cm_id*, int, int, void*, size_t);
};

extern Api api;

// Loads both libraries once; false (with the reason in IbApiError()) where they cannot be loaded.
bool LoadApi();
const std::string& IbApiError();

}  // namespace rds_native

#endif  // RDS_NATIVE_IB_API_H_
