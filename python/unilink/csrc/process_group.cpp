// torch.distributed backend "unilink": a c10d::ProcessGroup over the unilink C API.
// One translation unit on purpose: compiling against torch headers is slow, and the
// whole backend is a thin mapping (tensor -> pointer/count/dtype, ReduceOp -> ul_op_t).
// Why C++ and not a Python ProcessGroup: docs/decisions/0008-torch-backend-is-a-cpp-extension.md.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/utils/pybind.h>
#include <ATen/ATen.h>
#include <torch/version.h>

#include <unilink/unilink.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace unilink_torch {

using c10d::OpType;
using c10d::ReduceOp;
using c10d::Work;
using TensorList = std::vector<at::Tensor>;

// Every call runs to completion before it returns (NULL stream on host backends, and
// on device backends unilink synchronises the NULL stream), so a Work is born done.
// wait(timeout) therefore never waits and cannot time out: the group's timeout was
// already applied inside the call (unilink's timeout_ms), and a failure was raised by the
// call itself, before this Work existed. Returning true for any timeout is exact.
class WorkDone : public Work {
 public:
  WorkDone(int rank, OpType type, TensorList outputs)
      : Work(rank, type), outputs_(std::move(outputs)) {
    completed_ = true;
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds /*timeout: see above*/) override { return true; }
  TensorList result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    auto fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    fut->markCompleted(c10::IValue(outputs_));
    return fut;
  }

 private:
  TensorList outputs_;
};

[[noreturn]] static void fail(ul_result_t rc, ul_comm_t comm, const char *call) {
  const char *sentence = comm ? ul_comm_last_error(comm) : ul_last_error();
  // The prefix lets Python map the code back (unilink.Error.from_message).
  TORCH_CHECK(false, "unilink ", ul_result_name(rc), " (", static_cast<int>(rc), ") in ", call,
              ": ", (sentence && *sentence) ? sentence : ul_result_string(rc));
}

#define UL_TORCH_CHECK(call, comm)                          \
  do {                                                      \
    ul_result_t rc_ = (call);                               \
    if (rc_ != UL_OK) ::unilink_torch::fail(rc_, (comm), #call); \
  } while (0)

// torch 2.1 added float8_e4m3fn/e5m2, torch 2.3 uint16/32/64; Debian's 1.13 has neither.
#if defined(TORCH_VERSION_MAJOR) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1))
#define UL_TORCH_HAS_FP8 1
#endif
#if defined(TORCH_VERSION_MAJOR) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3))
#define UL_TORCH_HAS_UINT 1
#endif

[[noreturn]] static void unsupported_dtype(const at::Tensor &t, const char *why) {
  // Same prefix as fail(): unilink.torch.as_unilink_error maps it to unilink.Unsupported.
  TORCH_CHECK(false, "unilink ", ul_result_name(UL_ERR_UNSUPPORTED), " (",
              static_cast<int>(UL_ERR_UNSUPPORTED), ") in dtype_of: tensor dtype ",
              t.scalar_type(), " ", why);
}

// Bool reduces as uint8 with max/min (logical or/and), as gloo does.
static ul_dtype_t dtype_of(const at::Tensor &t) {
  switch (t.scalar_type()) {
    case at::kChar: return UL_INT8;
    case at::kByte: return UL_UINT8;
    case at::kBool: return UL_UINT8;
    case at::kInt: return UL_INT32;
    case at::kLong: return UL_INT64;
    case at::kHalf: return UL_FP16;
    case at::kBFloat16: return UL_BF16;
    case at::kFloat: return UL_FP32;
    case at::kDouble: return UL_FP64;
    case at::kComplexFloat: return UL_FP32;   // viewed as pairs of reals (sum/avg only)
    case at::kComplexDouble: return UL_FP64;
#ifdef UL_TORCH_HAS_FP8
    case at::kFloat8_e4m3fn: return UL_FP8_E4M3;
    case at::kFloat8_e5m2: return UL_FP8_E5M2;
#endif
#ifdef UL_TORCH_HAS_UINT
    case at::kUInt32: return UL_UINT32;
    case at::kUInt64: return UL_UINT64;
    case at::kUInt16: unsupported_dtype(t, "has no unilink counterpart (no 16-bit unsigned type)");
#endif
    default:
      unsupported_dtype(t, "has no unilink counterpart; supported: bool, uint8, int8, int32, "
                           "int64, float16, bfloat16, float32, float64, complex64, complex128"
#ifdef UL_TORCH_HAS_UINT
                           ", uint32, uint64"
#endif
#ifdef UL_TORCH_HAS_FP8
                           ", float8_e4m3fn, float8_e5m2"
#endif
      );
  }
}

static size_t count_of(const at::Tensor &t) {
  return static_cast<size_t>(t.numel()) * (t.is_complex() ? 2 : 1);
}

static void check_dense(const at::Tensor &t) {
  TORCH_CHECK(t.layout() == at::kStrided && t.is_contiguous(),
              "unilink: tensors must be dense and contiguous");
}

class ProcessGroupUnilink : public c10d::ProcessGroup {
 public:
  ProcessGroupUnilink(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                      int64_t timeout_ms, std::string cpu_backend, std::string device_backend)
      : ProcessGroup(rank, size), store_(store), timeout_ms_(timeout_ms),
        cpu_backend_(std::move(cpu_backend)), device_backend_(std::move(device_backend)) {
    init();
    comm_for(at::Device(at::kCPU));  // fail early and give DDP's checks a ready comm
  }

  ~ProcessGroupUnilink() override {
    for (auto &kv : comms_) ul_comm_destroy(kv.second);
  }

  const std::string getBackendName() const override { return "unilink"; }

  // Communicator for a device, created on first use: collective over the group, the
  // unique id travelling through the torch Store (bytes, NULs included).
  ul_comm_t comm_for(const at::Device &dev) {
    if (dev.is_cpu() && cpu_comm_) return cpu_comm_;  // hot path: no lock, no string
    std::lock_guard<std::mutex> lock(mu_);
    std::string key = dev.is_cpu() ? "cpu" : dev.str();
    auto it = comms_.find(key);
    if (it != comms_.end()) return it->second;
    std::string backend = dev.is_cpu() ? cpu_backend_ : device_backend_;
    std::string store_key = "unilink/id/" + key;
    if (backend == "auto") {  // resolve here: the mpi backend needs every rank below
      const char *best = ul_backend_auto();
      if (best) backend = best;
    }
    ul_unique_id_t id;
    if (backend == "mpi") {
      // The mpi backend's id is made collectively over MPI, by every rank at once.
      int r = -1, n = -1;
      UL_TORCH_CHECK(ul_bootstrap_mpi(backend.c_str(), &id, &r, &n), nullptr);
      TORCH_CHECK(r == rank_ && n == size_, "unilink: the mpi backend serves the whole MPI job "
                  "with torch ranks equal to MPI ranks (MPI rank ", r, " of ", n,
                  ", torch rank ", rank_, " of ", size_, ")");
    } else if (rank_ == 0) {
      UL_TORCH_CHECK(ul_get_unique_id(backend.c_str(), &id), nullptr);
      std::vector<uint8_t> bytes(id.internal, id.internal + UL_UNIQUE_ID_BYTES);
      store_->set(store_key, bytes);
    } else {
      std::vector<uint8_t> bytes = store_->get(store_key);
      TORCH_CHECK(bytes.size() == UL_UNIQUE_ID_BYTES, "unilink: bad unique id in store");
      std::copy(bytes.begin(), bytes.end(), id.internal);
    }
    ul_config_t cfg = UL_CONFIG_INIT;
    cfg.timeout_ms = timeout_ms_ > INT32_MAX ? 0 : static_cast<int32_t>(timeout_ms_);
    if (!dev.is_cpu()) cfg.device = dev.index() < 0 ? 0 : dev.index();
    cfg.name = "torch";
    ul_comm_t comm = nullptr;
    UL_TORCH_CHECK(ul_comm_init_rank(&comm, &cfg, size_, id, rank_), nullptr);
    comms_[key] = comm;
    if (dev.is_cpu()) cpu_comm_ = comm;
    return comm;
  }

  ul_comm_t comm_of(const at::Tensor &t) { return comm_for(t.device()); }

  static const at::Tensor &one(const TensorList &ts) {
    TORCH_CHECK(ts.size() == 1, "unilink: one tensor per call (one device per rank)");
    check_dense(ts[0]);
    return ts[0];
  }

  c10::intrusive_ptr<Work> done(OpType type, TensorList outs) {
    return c10::make_intrusive<WorkDone>(rank_, type, std::move(outs));
  }

  // In-place reduction of t (all ranks, or root only when root >= 0).
  void reduce_tensor(at::Tensor &t, const ReduceOp &rop, int root) {
    ul_comm_t comm = comm_of(t);
    ul_dtype_t dt = dtype_of(t);
    size_t n = count_of(t);
    bool is_bool = t.scalar_type() == at::kBool;
    ul_op_t op;
    switch (rop.op_) {
      case ReduceOp::SUM: op = is_bool ? UL_MAX : UL_SUM; break;
      case ReduceOp::AVG: op = UL_AVG; break;
      case ReduceOp::PRODUCT: op = is_bool ? UL_MIN : UL_PROD; break;
      case ReduceOp::MIN: op = UL_MIN; break;
      case ReduceOp::MAX: op = UL_MAX; break;
      case ReduceOp::PREMUL_SUM: {
        // Scale locally, then sum: what NCCL's premul-sum computes.
        auto *sup = dynamic_cast<c10d::NCCLPreMulSumSupplement *>(rop.supplement_.get());
        TORCH_CHECK(sup, "unilink: PREMUL_SUM without a factor");
        if (!sup->tensor_factors.empty()) t.mul_(sup->tensor_factors[0].to(t.device()));
        else t.mul_(sup->double_factor);
        op = UL_SUM;
        break;
      }
      case ReduceOp::BAND: case ReduceOp::BOR: case ReduceOp::BXOR: {
        // unilink has no bitwise ops: gather every rank's tensor and fold locally.
        TORCH_CHECK(!t.is_floating_point() && !t.is_complex(),
                    "unilink: bitwise reduce needs an integer tensor");
        at::Tensor all = at::empty({size_, t.numel()}, t.options());
        UL_TORCH_CHECK(ul_allgather(t.data_ptr(), all.data_ptr(), n, dt, comm, nullptr), comm);
        at::Tensor acc = all[0].clone();
        for (int r = 1; r < size_; r++) {
          if (rop.op_ == ReduceOp::BAND) acc.bitwise_and_(all[r]);
          else if (rop.op_ == ReduceOp::BOR) acc.bitwise_or_(all[r]);
          else acc.bitwise_xor_(all[r]);
        }
        if (root < 0 || root == rank_) t.view(-1).copy_(acc);
        return;
      }
      default: TORCH_CHECK(false, "unilink: unsupported ReduceOp ", static_cast<int>(rop.op_));
    }
    TORCH_CHECK(!t.is_complex() || op == UL_SUM || op == UL_AVG,
                "unilink: complex tensors reduce with SUM or AVG only");
    void *p = t.data_ptr();
    if (root < 0) UL_TORCH_CHECK(ul_allreduce(p, p, n, dt, op, comm, nullptr), comm);
    else UL_TORCH_CHECK(ul_reduce(p, p, n, dt, op, root, comm, nullptr), comm);
  }

  c10::intrusive_ptr<Work> broadcast(TensorList &ts, const c10d::BroadcastOptions &o) override {
    const at::Tensor &t = one(ts);
    ul_comm_t comm = comm_of(t);
    void *p = t.data_ptr();
    UL_TORCH_CHECK(ul_broadcast(p, p, count_of(t), dtype_of(t), (int)o.rootRank, comm, nullptr),
                   comm);
    return done(OpType::BROADCAST, ts);
  }

  c10::intrusive_ptr<Work> allreduce(TensorList &ts, const c10d::AllreduceOptions &o) override {
    at::Tensor t = one(ts);
    reduce_tensor(t, o.reduceOp, -1);
    return done(OpType::ALLREDUCE, ts);
  }

  c10::intrusive_ptr<Work> allreduce_coalesced(TensorList &ts,
                                               const c10d::AllreduceCoalescedOptions &o) override {
    for (auto &t : ts) {
      check_dense(t);
      reduce_tensor(t, o.reduceOp, -1);
    }
    return done(OpType::ALLREDUCE_COALESCED, ts);
  }

  c10::intrusive_ptr<Work> reduce(TensorList &ts, const c10d::ReduceOptions &o) override {
    at::Tensor t = one(ts);
    reduce_tensor(t, o.reduceOp, (int)o.rootRank);
    return done(OpType::REDUCE, ts);
  }

  // outs[i] = rank i's input: one flat allgather, copied out unless already flat.
  void gather_into(std::vector<at::Tensor> &outs, const at::Tensor &in) {
    TORCH_CHECK((int)outs.size() == size_, "unilink: need one output tensor per rank");
    at::Tensor flat = at::empty({size_, in.numel()}, in.options());
    ul_comm_t comm = comm_of(in);
    UL_TORCH_CHECK(ul_allgather(in.data_ptr(), flat.data_ptr(), count_of(in), dtype_of(in), comm,
                                nullptr), comm);
    for (int r = 0; r < size_; r++) outs[r].view(-1).copy_(flat[r]);
  }

  c10::intrusive_ptr<Work> allgather(std::vector<TensorList> &outs, TensorList &ins,
                                     const c10d::AllgatherOptions &) override {
    TORCH_CHECK(outs.size() == 1, "unilink: one output list per call");
    gather_into(outs[0], one(ins));
    return done(OpType::ALLGATHER, outs[0]);
  }

  c10::intrusive_ptr<Work> _allgather_base(at::Tensor &out, at::Tensor &in,
                                           const c10d::AllgatherOptions &) override {
    check_dense(out);
    check_dense(in);
    TORCH_CHECK(out.numel() == in.numel() * size_, "unilink: output must hold size * input");
    ul_comm_t comm = comm_of(in);
    UL_TORCH_CHECK(ul_allgather(in.data_ptr(), out.data_ptr(), count_of(in), dtype_of(in), comm,
                                nullptr), comm);
    return done(OpType::_ALLGATHER_BASE, {out});
  }

  c10::intrusive_ptr<Work> allgather_coalesced(std::vector<TensorList> &outs, TensorList &ins,
                                               const c10d::AllgatherOptions &) override {
    TORCH_CHECK(outs.size() == ins.size(), "unilink: one output list per input");
    for (size_t i = 0; i < ins.size(); i++) {
      check_dense(ins[i]);
      gather_into(outs[i], ins[i]);
    }
    return done(OpType::ALLGATHER_COALESCED, ins);
  }

  c10::intrusive_ptr<Work> gather(std::vector<TensorList> &outs, TensorList &ins,
                                  const c10d::GatherOptions &o) override {
    const at::Tensor &in = one(ins);
    int root = (int)o.rootRank;
    ul_comm_t comm = comm_of(in);
    at::Tensor flat;
    if (rank_ == root) {
      TORCH_CHECK(outs.size() == 1 && (int)outs[0].size() == size_,
                  "unilink: gather needs one output per rank on root");
      flat = at::empty({size_, in.numel()}, in.options());
    }
    UL_TORCH_CHECK(ul_gather(in.data_ptr(), rank_ == root ? flat.data_ptr() : nullptr,
                             count_of(in), dtype_of(in), root, comm, nullptr), comm);
    if (rank_ == root)
      for (int r = 0; r < size_; r++) outs[0][r].view(-1).copy_(flat[r]);
    return done(OpType::GATHER, rank_ == root ? outs[0] : TensorList{});
  }

  c10::intrusive_ptr<Work> scatter(TensorList &outs, std::vector<TensorList> &ins,
                                   const c10d::ScatterOptions &o) override {
    const at::Tensor &out = one(outs);
    int root = (int)o.rootRank;
    ul_comm_t comm = comm_of(out);
    at::Tensor flat;
    if (rank_ == root) {
      TORCH_CHECK(ins.size() == 1 && (int)ins[0].size() == size_,
                  "unilink: scatter needs one input per rank on root");
      std::vector<at::Tensor> rows;
      for (auto &t : ins[0]) rows.push_back(t.reshape({-1}));
      flat = at::cat(rows);
    }
    UL_TORCH_CHECK(ul_scatter(rank_ == root ? flat.data_ptr() : nullptr, out.data_ptr(),
                              count_of(out), dtype_of(out), root, comm, nullptr), comm);
    return done(OpType::SCATTER, outs);
  }

  void reduce_scatter_flat(at::Tensor &out, at::Tensor flat, const ReduceOp &rop) {
    ul_comm_t comm = comm_of(out);
    if (rop.op_ == ReduceOp::SUM || rop.op_ == ReduceOp::AVG || rop.op_ == ReduceOp::MIN ||
        rop.op_ == ReduceOp::MAX || rop.op_ == ReduceOp::PRODUCT) {
      if (out.scalar_type() != at::kBool) {
        ul_op_t op = rop.op_ == ReduceOp::SUM ? UL_SUM : rop.op_ == ReduceOp::AVG ? UL_AVG
                   : rop.op_ == ReduceOp::MIN ? UL_MIN : rop.op_ == ReduceOp::MAX ? UL_MAX : UL_PROD;
        UL_TORCH_CHECK(ul_reduce_scatter(flat.data_ptr(), out.data_ptr(), count_of(out),
                                         dtype_of(out), op, comm, nullptr), comm);
        return;
      }
    }
    // Other ops (premul-sum, bitwise, bool): reduce everything, keep our block.
    reduce_tensor(flat, rop, -1);
    out.view(-1).copy_(flat.view({size_, -1})[rank_]);
  }

  c10::intrusive_ptr<Work> reduce_scatter(TensorList &outs, std::vector<TensorList> &ins,
                                          const c10d::ReduceScatterOptions &o) override {
    at::Tensor out = one(outs);
    TORCH_CHECK(ins.size() == 1 && (int)ins[0].size() == size_,
                "unilink: reduce_scatter needs one input per rank");
    std::vector<at::Tensor> rows;
    for (auto &t : ins[0]) rows.push_back(t.reshape({-1}));
    reduce_scatter_flat(out, at::cat(rows), o.reduceOp);
    return done(OpType::REDUCE_SCATTER, outs);
  }

  c10::intrusive_ptr<Work> _reduce_scatter_base(at::Tensor &out, at::Tensor &in,
                                                const c10d::ReduceScatterOptions &o) override {
    check_dense(out);
    check_dense(in);
    TORCH_CHECK(in.numel() == out.numel() * size_, "unilink: input must hold size * output");
    bool native = o.reduceOp.op_ <= ReduceOp::MAX && out.scalar_type() != at::kBool;
    reduce_scatter_flat(out, native ? in : in.clone(), o.reduceOp);
    return done(OpType::_REDUCE_SCATTER_BASE, {out});
  }

  // Split sizes count rows of dim 0; unilink counts elements.
  std::vector<size_t> elem_counts(const at::Tensor &t, const std::vector<int64_t> &splits) {
    int64_t row = t.dim() == 0 ? 1 : t.numel() / std::max<int64_t>(t.size(0), 1);
    if (t.is_complex()) row *= 2;
    std::vector<size_t> c(size_);
    if (splits.empty()) {
      TORCH_CHECK(t.dim() > 0 && t.size(0) % size_ == 0,
                  "unilink: dim 0 must divide by the group size without split sizes");
      for (auto &x : c) x = (size_t)(t.size(0) / size_ * row);
    } else {
      TORCH_CHECK((int)splits.size() == size_, "unilink: one split size per rank");
      for (int r = 0; r < size_; r++) c[r] = (size_t)(splits[r] * row);
    }
    return c;
  }

  static std::vector<size_t> displs_of(const std::vector<size_t> &c) {
    std::vector<size_t> d(c.size());
    size_t s = 0;
    for (size_t i = 0; i < c.size(); i++) { d[i] = s; s += c[i]; }
    return d;
  }

  c10::intrusive_ptr<Work> alltoall_base(at::Tensor &out, at::Tensor &in,
                                         std::vector<int64_t> &outSplits,
                                         std::vector<int64_t> &inSplits,
                                         const c10d::AllToAllOptions &) override {
    check_dense(out);
    check_dense(in);
    ul_comm_t comm = comm_of(in);
    ul_dtype_t dt = dtype_of(in);
    if (outSplits.empty() && inSplits.empty()) {
      TORCH_CHECK(in.numel() == out.numel() && in.numel() % size_ == 0,
                  "unilink: alltoall needs equal tensors divisible by the group size");
      UL_TORCH_CHECK(ul_alltoall(in.data_ptr(), out.data_ptr(), count_of(in) / size_, dt, comm,
                                 nullptr), comm);
    } else {
      auto sc = elem_counts(in, inSplits), rc = elem_counts(out, outSplits);
      auto sd = displs_of(sc), rd = displs_of(rc);
      UL_TORCH_CHECK(ul_alltoallv(in.data_ptr(), sc.data(), sd.data(), out.data_ptr(), rc.data(),
                                  rd.data(), dt, comm, nullptr), comm);
    }
    return done(OpType::ALLTOALL_BASE, {out});
  }

  c10::intrusive_ptr<Work> alltoall(TensorList &outs, TensorList &ins,
                                    const c10d::AllToAllOptions &) override {
    TORCH_CHECK((int)outs.size() == size_ && (int)ins.size() == size_,
                "unilink: alltoall needs one tensor per rank");
    std::vector<at::Tensor> rows;
    std::vector<size_t> sc(size_), rc(size_);
    for (int r = 0; r < size_; r++) {
      rows.push_back(ins[r].reshape({-1}));
      sc[r] = count_of(ins[r]);
      rc[r] = count_of(outs[r]);
    }
    at::Tensor flat_in = at::cat(rows);
    size_t total = 0;
    for (auto c : rc) total += c;
    at::Tensor flat_out = at::empty({(int64_t)(total / (flat_in.is_complex() ? 2 : 1))},
                                    flat_in.options());
    auto sd = displs_of(sc), rd = displs_of(rc);
    ul_comm_t comm = comm_of(flat_in);
    UL_TORCH_CHECK(ul_alltoallv(flat_in.data_ptr(), sc.data(), sd.data(), flat_out.data_ptr(),
                                rc.data(), rd.data(), dtype_of(flat_in), comm, nullptr), comm);
    int64_t off = 0;
    for (int r = 0; r < size_; r++) {
      outs[r].view(-1).copy_(flat_out.narrow(0, off, outs[r].numel()));
      off += outs[r].numel();
    }
    return done(OpType::ALLTOALL, outs);
  }

  c10::intrusive_ptr<Work> barrier(const c10d::BarrierOptions &) override {
    ul_comm_t comm = comm_for(at::Device(at::kCPU));
    UL_TORCH_CHECK(ul_barrier(comm, nullptr), comm);
    return done(OpType::BARRIER, {});
  }

  // Point to point: a lone send blocks until matched, so batch_isend_irecv's
  // coalescing brackets become a unilink group (fused, no ordering deadlock).
  void startCoalescing() override { UL_TORCH_CHECK(ul_group_start(), nullptr); }
  void endCoalescing(std::vector<c10::intrusive_ptr<Work>> &) override {
    ul_comm_t comm = comms_.count("cpu") ? comms_["cpu"] : nullptr;
    UL_TORCH_CHECK(ul_group_end(), comm);
  }

  c10::intrusive_ptr<Work> send(TensorList &ts, int dst, int) override {
    const at::Tensor &t = one(ts);
    ul_comm_t comm = comm_of(t);
    UL_TORCH_CHECK(ul_send(t.data_ptr(), count_of(t), dtype_of(t), dst, comm, nullptr), comm);
    return done(OpType::SEND, ts);
  }

  c10::intrusive_ptr<Work> recv(TensorList &ts, int src, int) override {
    const at::Tensor &t = one(ts);
    ul_comm_t comm = comm_of(t);
    UL_TORCH_CHECK(ul_recv(t.data_ptr(), count_of(t), dtype_of(t), src, comm, nullptr), comm);
    return done(OpType::RECV, ts);
  }

  // Release every blocked call of every communicator (they raise UL_ERR_ABORTED).
  void abort() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto &kv : comms_) ul_comm_abort(kv.second);
    comms_.clear();
    cpu_comm_ = nullptr;
  }

  std::vector<std::pair<std::string, uintptr_t>> comms() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<std::string, uintptr_t>> v;
    for (auto &kv : comms_) v.emplace_back(kv.first, reinterpret_cast<uintptr_t>(kv.second));
    return v;
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  int64_t timeout_ms_;
  std::string cpu_backend_, device_backend_;
  std::mutex mu_;
  std::map<std::string, ul_comm_t> comms_;
  ul_comm_t cpu_comm_ = nullptr;
};

// A uint8 CPU tensor of `nbytes` in memory from ul_mem_alloc on the group's CPU
// communicator: peers map it, so collectives on it run zero-copy. The deleter holds a
// reference to the group, so the communicator outlives every such tensor.
static at::Tensor alloc_bytes(const c10::intrusive_ptr<ProcessGroupUnilink> &pg, int64_t nbytes) {
  ul_comm_t comm = pg->comm_for(at::Device(at::kCPU));
  void *p = nullptr;
  UL_TORCH_CHECK(ul_mem_alloc(comm, static_cast<size_t>(nbytes > 0 ? nbytes : 1), &p), comm);
  auto keep = pg;
  return at::from_blob(p, {nbytes}, [keep, comm](void *q) { ul_mem_free(comm, q); },
                       at::TensorOptions().dtype(at::kByte));
}

}  // namespace unilink_torch

// The C library alone, for the benchmark's overhead figure: `iters` in-place allreduces of
// `count` fp32 on an existing communicator, timed in C (seconds per call).
static double time_allreduce(uintptr_t comm_addr, size_t count, int iters) {
  ul_comm_t comm = reinterpret_cast<ul_comm_t>(comm_addr);
  std::vector<float> buf(count ? count : 1, 1.0f);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; i++)
    UL_TORCH_CHECK(ul_allreduce(buf.data(), buf.data(), count, UL_FP32, UL_SUM, comm, nullptr), comm);
  std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  return dt.count() / (iters > 0 ? iters : 1);
}

PYBIND11_MODULE(_C, m) {
  m.def("time_allreduce", &time_allreduce, py::arg("comm"), py::arg("count"), py::arg("iters"),
        py::call_guard<py::gil_scoped_release>());
  using PG = unilink_torch::ProcessGroupUnilink;
  py::object base = py::module::import("torch.distributed").attr("ProcessGroup");
  py::class_<PG, c10::intrusive_ptr<PG>>(m, "ProcessGroupUnilink", base)
      .def(py::init<const c10::intrusive_ptr<c10d::Store> &, int, int, int64_t, std::string,
                    std::string>(),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_ms"),
           py::arg("cpu_backend") = "auto", py::arg("device_backend") = "auto:device",
           py::call_guard<py::gil_scoped_release>())
      .def("alloc_bytes", &unilink_torch::alloc_bytes, py::arg("nbytes"))
      .def("abort", &PG::abort, py::call_guard<py::gil_scoped_release>())
      .def("comms", &PG::comms, "(device, ul_comm_t address) of each communicator created");
}
