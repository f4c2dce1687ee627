// IbEndpoint: RDMA. Application memory regions (RDS_GET_MR) registered in the device's shared PD,
// and RDMA READ/WRITE/atomic ops posted on a connection, each with its local memory registered
// for as long as its work requests run.
#include "ib_endpoint.h"
#include <unistd.h>
#include <cerrno>
#include <algorithm>
#include <cstring>
#include "ib_util.h"

namespace rds_native {

namespace {

// The bytes of a Uint8Array (a Buffer or any view).
bool Bytes(Napi::Value v, uint8_t** data, size_t* len) {
  if (!v.IsTypedArray()) return false;
  auto ta = v.As<Napi::TypedArray>();
  if (ta.TypedArrayType() != napi_uint8_array) return false;
  auto u8 = v.As<Napi::Uint8Array>();
  *data = u8.Data();
  *len = u8.ByteLength();
  return true;
}

}  // namespace

// One work request of an RDMA op completed: the op is reported once, with the first error or,
// when its last work request is done, success; its local memory is released then.
void Endpoint::OpCompleted(Conn* c, const ibv_wc& wc, std::vector<int32_t>& batch) {
  uint32_t tag = static_cast<uint32_t>(wc.wr_id);
  auto it = c->ops.find(tag);
  if (it == c->ops.end()) return;
  RdmaOp& op = *it->second;
  if (c->rdmaWrs > 0) c->rdmaWrs--;
  if (wc.status != IBV_WC_SUCCESS && !op.reported) {
    op.reported = true;
    batch.push_back(static_cast<int32_t>(tag));
    batch.push_back(static_cast<int32_t>(wc.status));
    batch.push_back(0);
  }
  if (--op.remaining > 0) return;
  if (!op.reported) {
    batch.push_back(static_cast<int32_t>(tag));
    batch.push_back(0);
    batch.push_back(static_cast<int32_t>(op.bytes));
  }
  c->ops.erase(it);
}

// pollOps(id) -> Int32Array [tag, status, bytes]*: before a connection is destroyed, the RDMA
// ops whose completions are already in its CQ (the kernel drains its rings at shutdown too), so
// an op that finished, or failed on the peer's refusal, is not taken for one cut off. Other
// completions are discarded: the connection is going away.
Napi::Value Endpoint::PollOps(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Conn* c = Find(info);
  std::vector<int32_t> batch;
  if (c != nullptr && c->cq) {
    ibv_wc wc[32];
    int got;
    while ((got = ibv_poll_cq(c->cq.get(), 32, wc)) > 0) {
      for (int i = 0; i < got; i++)
        if (wc[i].wr_id & kOpWr) OpCompleted(c, wc[i], batch);
    }
  }
  Napi::Int32Array arr = Napi::Int32Array::New(env, batch.size());
  if (!batch.empty()) std::memcpy(arr.Data(), batch.data(), batch.size() * sizeof(int32_t));
  return arr;
}

// regMr(localAddress, Uint8Array, readWrite) -> [handle, rkey, offset]. Registers the memory
// zero-based as the kernel's RDS does: I/O virtual address 0 is the start of its first page, so
// its first byte is at `offset` (its offset in that page; uverbs requires the I/O address and
// the memory to agree modulo the page size). In the PD of the device owning the address: remote
// read always, remote write with readWrite. The memory is referenced until deregMr (or close).
Napi::Value Endpoint::RegMr(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  sockaddr_in sin;
  uint8_t* data;
  size_t len;
  if (info.Length() < 3 || !info[0].IsString() || !ParseIpv4(info[0].As<Napi::String>(), 0, &sin) ||
      !Bytes(info[1], &data, &len) || len == 0 || !info[2].IsBoolean()) {
    Napi::TypeError::New(env, "regMr(ipv4Address, nonEmptyUint8Array, readWrite)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (api.reg_mr_iova == nullptr) {
    Napi::Error e = Napi::Error::New(env,
                                     "RDMA memory registration needs ibv_reg_mr_iova (libibverbs 1.8 / rdma-core 25 "
                                     "or newer); this libibverbs lacks it");
    e.Set("errno", Napi::Number::New(env, EOPNOTSUPP));
    e.ThrowAsJavaScriptException();
    return env.Undefined();
  }
  rdma_cm_id* raw;
  if (api.create_id(nullptr, &raw, nullptr, RDMA_PS_TCP) != 0) {
    ThrowErrno(env, "rdma_create_id", errno);
    return env.Undefined();
  }
  CmId cm(raw);
  if (api.bind_addr(raw, reinterpret_cast<sockaddr*>(&sin)) != 0 || raw->verbs == nullptr) {
    ThrowErrno(env, "rdma_bind_addr (no RDMA device owns the address)", errno != 0 ? errno : EADDRNOTAVAIL);
    return env.Undefined();
  }
  std::shared_ptr<Pd> pd = AcquirePd(raw->verbs);
  if (!pd) {
    ThrowErrno(env, "ibv_alloc_pd", errno);
    return env.Undefined();
  }
  // The first region on the device keeps its id as the PD's anchor; later ones let theirs go.
  if (!pd->anchor) pd->anchor = std::move(cm);
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  if (info[2].As<Napi::Boolean>().Value()) access |= IBV_ACCESS_REMOTE_WRITE;
  // Atomics on the region follow remote write (an atomic writes), where the device has them.
  ibv_device_attr da;
  if ((access & IBV_ACCESS_REMOTE_WRITE) && api.query_device(pd->ctx, &da) == 0 && da.atomic_cap != IBV_ATOMIC_NONE)
    access |= IBV_ACCESS_REMOTE_ATOMIC;
  uint64_t offset = reinterpret_cast<uintptr_t>(data) & (static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) - 1);
  MemoryRegion mr(api.reg_mr_iova(pd->pd.get(), data, len, offset, access));
  if (!mr) {
    ThrowErrno(env, "ibv_reg_mr_iova", errno);
    return env.Undefined();
  }
  uint32_t rkey = mr->rkey;
  auto m = std::make_unique<Mr>();
  m->pd = std::move(pd);
  m->mem = Napi::Persistent(info[1].As<Napi::Object>());
  m->mr = std::move(mr);
  uint32_t h = nextMr_++;
  res_.mrs[h] = std::move(m);
  Napi::Array out = Napi::Array::New(env, 3);
  out.Set(0u, Napi::Number::New(env, h));
  out.Set(1u, Napi::Number::New(env, rkey));
  out.Set(2u, Napi::Number::New(env, static_cast<double>(offset)));
  return out;
}

// deregMr(handle) -> true if it was registered. The memory is no longer referenced.
Napi::Value Endpoint::DeregMr(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) return Napi::Boolean::New(env, false);
  return Napi::Boolean::New(env, res_.mrs.erase(info[0].As<Napi::Number>().Uint32Value()) > 0);
}

// postRdma(id, tag, write, remoteAddr (bigint), rkey, [Uint8Array...]) -> 0 or an errno (EAGAIN:
// no room in the send queue now, retry after a completion). Registers the local memory for the
// op's duration and posts RDMA WRITE or READ work requests (at most maxSge entries each, at
// consecutive remote addresses); the op's completion comes as [tag, status, bytes] in a batch.
Napi::Value Endpoint::PostRdma(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Conn* c = FindOrThrow(info);
  if (c == nullptr) return env.Undefined();
  bool lossless = false;
  if (info.Length() < 6 || !info[1].IsNumber() || !(info[2].IsBoolean() || info[2].IsNumber()) || !info[3].IsBigInt() ||
      !info[4].IsNumber() || !info[5].IsArray()) {
    Napi::TypeError::New(env, "postRdma(id, tag, write | kind, remoteAddr, rkey, buffers, compareAdd?, swap?)")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (!c->HasQp() || !c->pd) return Napi::Number::New(env, ENOTCONN);
  uint32_t tag = info[1].As<Napi::Number>().Uint32Value();
  // kind: 0 RDMA WRITE, 1 RDMA READ, 2 atomic fetch-and-add, 3 atomic compare-and-swap.
  uint32_t kind =
      info[2].IsBoolean() ? (info[2].As<Napi::Boolean>().Value() ? 0 : 1) : info[2].As<Napi::Number>().Uint32Value();
  bool write = kind == 0;
  bool atomic = kind == 2 || kind == 3;
  uint64_t compareAdd = 0, swap = 0;
  if (atomic) {
    bool l1 = true, l2 = true;
    if (info.Length() > 6 && info[6].IsBigInt()) compareAdd = info[6].As<Napi::BigInt>().Uint64Value(&l1);
    if (info.Length() > 7 && info[7].IsBigInt()) swap = info[7].As<Napi::BigInt>().Uint64Value(&l2);
    if (!c->atomics) return Napi::Number::New(env, EOPNOTSUPP);
    if (!l1 || !l2) return Napi::Number::New(env, EINVAL);
  }
  if (kind > 3) return Napi::Number::New(env, EINVAL);
  uint64_t raddr = info[3].As<Napi::BigInt>().Uint64Value(&lossless);
  uint32_t rkey = info[4].As<Napi::Number>().Uint32Value();
  Napi::Array bufs = info[5].As<Napi::Array>();
  uint32_t n = bufs.Length();
  if (tag == 0 || !lossless || n == 0 || c->ops.count(tag) != 0) return Napi::Number::New(env, EINVAL);
  uint32_t nwr = (n + c->maxSge - 1) / c->maxSge;
  if (c->rdmaWrs + nwr > kRdmaWrs) return Napi::Number::New(env, nwr > kRdmaWrs ? EMSGSIZE : EAGAIN);
  // Until it is posted the op is only a local: an early return releases what it registered.
  auto op = std::make_unique<RdmaOp>();
  op->tag = tag;
  std::vector<ibv_sge> sges;
  sges.reserve(n);
  for (uint32_t i = 0; i < n; i++) {
    uint8_t* data;
    size_t len;
    Napi::Value v = bufs.Get(i);
    if (!Bytes(v, &data, &len)) return Napi::Number::New(env, EINVAL);
    if (len == 0) continue;
    MemoryRegion m(api.reg_mr(c->pd->pd.get(), data, len, IBV_ACCESS_LOCAL_WRITE));
    if (!m) return Napi::Number::New(env, errno != 0 ? errno : ENOMEM);
    ibv_sge sge;
    sge.addr = reinterpret_cast<uintptr_t>(data);
    sge.length = static_cast<uint32_t>(len);
    sge.lkey = m->lkey;
    sges.push_back(sge);
    op->mem.push_back(Napi::Persistent(v.As<Napi::Object>()));
    op->mrs.push_back(std::move(m));
    op->bytes += static_cast<uint32_t>(len);
  }
  if (sges.empty() || (atomic && (sges.size() != 1 || sges[0].length != 8 || (raddr & 7) != 0)))
    return Napi::Number::New(env, EINVAL);
  nwr = (static_cast<uint32_t>(sges.size()) + c->maxSge - 1) / c->maxSge;
  std::vector<ibv_send_wr> wrs(nwr);
  uint64_t at = raddr;
  for (uint32_t w = 0; w < nwr; w++) {
    ibv_send_wr& wr = wrs[w];
    std::memset(&wr, 0, sizeof wr);
    uint32_t first = w * c->maxSge;
    uint32_t count = std::min<uint32_t>(c->maxSge, static_cast<uint32_t>(sges.size()) - first);
    wr.wr_id = kOpWr | tag;
    wr.sg_list = &sges[first];
    wr.num_sge = static_cast<int>(count);
    wr.send_flags = IBV_SEND_SIGNALED;
    if (atomic) {
      wr.opcode = kind == 2 ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
      wr.wr.atomic.remote_addr = at;
      wr.wr.atomic.compare_add = compareAdd;
      wr.wr.atomic.swap = swap;
      wr.wr.atomic.rkey = rkey;
    } else {
      wr.opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
      wr.wr.rdma.remote_addr = at;
      wr.wr.rdma.rkey = rkey;
    }
    for (uint32_t k = 0; k < count; k++) at += sges[first + k].length;
    wr.next = w + 1 < nwr ? &wrs[w + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(c->cm->qp, wrs.data(), &bad);
  if (rc != 0) {
    // Work requests before `bad` were posted: their completions still name the op, so it stays
    // (a QP that refuses a post is broken; the connection is dropped and the op reported then).
    uint32_t posted = 0;
    for (ibv_send_wr* p = wrs.data(); p != bad && p != nullptr; p = p->next) posted++;
    if (posted == 0) return Napi::Number::New(env, rc);
    nwr = posted;
  }
  op->remaining = nwr;
  c->rdmaWrs += nwr;
  c->ops[tag] = std::move(op);
  return Napi::Number::New(env, rc);
}

}  // namespace rds_native
