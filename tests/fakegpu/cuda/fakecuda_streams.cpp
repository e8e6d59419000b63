// Streams and events of the fake CUDA runtime: one worker thread per stream with a FIFO
// queue, the legacy default stream's implicit synchronization as dependencies between
// tasks, events as (stream, sequence) marks, and their entry points. Over fakecuda_errors.cpp.
#include "fakecuda_int.h"

using namespace fc;

namespace fc {

Device *devs() {
  static Device *d = new Device[kMaxDev];
  return d;
}

static std::mutex g_reg_m; // stream/event handle registries
static std::unordered_map<void *, std::shared_ptr<Stream>> &stream_reg() {
  static auto *m = new std::unordered_map<void *, std::shared_ptr<Stream>>;
  return *m;
}
static std::atomic<unsigned> g_stream_ids{0};

static uint64_t stream_done(Stream &s) {
  std::lock_guard<std::mutex> l(s.m);
  return s.done;
}

void wait_done(Stream &s, uint64_t seq) {
  std::unique_lock<std::mutex> l(s.m);
  s.cv_done.wait(l, [&] { return s.done >= seq; });
}

static void worker_main(std::shared_ptr<Stream> s) {
  t_worker = true;
  t_device = s->device;
  std::mt19937_64 rng(cfg().seed * 0x9e3779b97f4a7c15ULL + s->id);
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> l(s->m);
      s->cv_work.wait(l, [&] { return !s->q.empty() || s->dying; });
      if (s->q.empty()) break;
      t = std::move(s->q.front());
      s->q.pop_front();
    }
    for (auto &d : t.deps) wait_done(*d.s, d.seq);
    t.deps.clear();
    if (cfg().delay_us) {
      unsigned us = (unsigned)(rng() % (cfg().delay_us + 1ULL));
      if (us) std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
    if (t.fn && !(t.device_work && sticky(s->device) != cudaSuccess)) t.fn();
    t.fn = nullptr;
    {
      std::lock_guard<std::mutex> l(s->m);
      s->done = t.seq;
    }
    s->cv_done.notify_all();
  }
}

static std::shared_ptr<Stream> new_stream(int dev, unsigned flags, StreamKind kind, int prio) {
  auto s = std::make_shared<Stream>();
  s->device = dev;
  s->flags = flags;
  s->kind = kind;
  s->priority = prio;
  s->id = ++g_stream_ids;
  std::thread(worker_main, s).detach();
  if (kind != SK_LEGACY) {
    Device &D = devs()[dev];
    std::lock_guard<std::mutex> l(D.m);
    auto &v = D.streams;
    v.erase(std::remove_if(v.begin(), v.end(), [](const std::weak_ptr<Stream> &w) { return w.expired(); }),
            v.end());
    v.push_back(s);
  }
  return s;
}

static std::shared_ptr<Stream> legacy_of(int dev) {
  Device &D = devs()[dev];
  {
    std::lock_guard<std::mutex> l(D.m);
    if (D.legacy) return D.legacy;
  }
  auto s = new_stream(dev, 0, SK_LEGACY, 0);
  std::lock_guard<std::mutex> l(D.m);
  if (!D.legacy) D.legacy = s;
  else {
    std::lock_guard<std::mutex> l2(s->m);
    s->dying = true;
    s->cv_work.notify_all();
  }
  return D.legacy;
}

// This thread's cudaStreamPerThread of each device; at thread exit they drain and go away.
struct PerThreadStreams {
  std::shared_ptr<Stream> s[kMaxDev];
  ~PerThreadStreams() {
    for (auto &p : s) {
      if (!p) continue;
      std::lock_guard<std::mutex> l(p->m);
      p->dying = true;
      p->cv_work.notify_all();
    }
  }
};
static thread_local PerThreadStreams t_per_thread;

static std::shared_ptr<Stream> per_thread_of(int dev) {
  auto &p = t_per_thread.s[dev];
  if (!p) p = new_stream(dev, 0, SK_PER_THREAD, 0);
  return p;
}

// Resolve a cudaStream_t: 0 and cudaStreamLegacy are the current device's legacy stream,
// cudaStreamPerThread this thread's blocking stream of the current device.
cudaError_t resolve(cudaStream_t h, std::shared_ptr<Stream> *out) {
  if (!dev_ok(t_device)) return cudaErrorInvalidDevice;
  if (h == nullptr || h == cudaStreamLegacy) {
    *out = legacy_of(t_device);
    return cudaSuccess;
  }
  if (h == cudaStreamPerThread) {
    *out = per_thread_of(t_device);
    return cudaSuccess;
  }
  std::lock_guard<std::mutex> l(g_reg_m);
  auto it = stream_reg().find((void *)h);
  if (it == stream_reg().end()) return cudaErrorInvalidResourceHandle;
  *out = it->second;
  return cudaSuccess;
}

// Enqueue @fn on @s. The implicit synchronization of the legacy default stream: its work
// waits for all earlier work of the device's blocking streams, and a blocking stream's work
// waits for all earlier legacy work. Returns the task's sequence number.
uint64_t enqueue(const std::shared_ptr<Stream> &s, std::function<void()> fn, bool device_work,
                 std::vector<Dep> extra) {
  Device &D = devs()[s->device];
  Task t;
  t.fn = std::move(fn);
  t.device_work = device_work;
  t.deps = std::move(extra);
  std::lock_guard<std::mutex> l(D.m);
  if (s->kind == SK_LEGACY) {
    for (auto &w : D.streams) {
      auto b = w.lock();
      if (!b || !b->blocking()) continue;
      uint64_t e;
      {
        std::lock_guard<std::mutex> l2(b->m);
        e = b->enq;
        if (b->done >= e) continue;
      }
      t.deps.push_back({b, e});
    }
  } else if (s->blocking() && D.legacy) {
    auto &L = D.legacy;
    std::lock_guard<std::mutex> l2(L->m);
    if (L->done < L->enq) t.deps.push_back({L, L->enq});
  }
  if (cfg().serialize && D.last && D.last != s) t.deps.push_back({D.last, D.last_seq});
  std::lock_guard<std::mutex> l3(s->m);
  t.seq = ++s->enq;
  if (cfg().serialize) {
    D.last = s;
    D.last_seq = t.seq;
  }
  uint64_t seq = t.seq;
  s->q.push_back(std::move(t));
  s->cv_work.notify_one();
  return seq;
}

// Wait for all work enqueued on @s so far.
void sync_stream(const std::shared_ptr<Stream> &s) {
  uint64_t e;
  {
    std::lock_guard<std::mutex> l(s->m);
    e = s->enq;
  }
  wait_done(*s, e);
}

void sync_device(int dev) {
  std::vector<std::shared_ptr<Stream>> all;
  {
    Device &D = devs()[dev];
    std::lock_guard<std::mutex> l(D.m);
    if (D.legacy) all.push_back(D.legacy);
    for (auto &w : D.streams)
      if (auto s = w.lock()) all.push_back(s);
  }
  for (auto &s : all) sync_stream(s);
}

// ---------------------------------------------------------------- events
struct Event {
  int device = 0;
  unsigned flags = 0;
  std::mutex m;
  std::shared_ptr<Stream> s; // last record
  uint64_t seq = 0;
  std::shared_ptr<std::atomic<int64_t>> t_ns;
};
static std::unordered_map<void *, std::shared_ptr<Event>> &event_reg() {
  static auto *m = new std::unordered_map<void *, std::shared_ptr<Event>>;
  return *m;
}
static std::shared_ptr<Event> find_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> l(g_reg_m);
  auto it = event_reg().find((void *)e);
  return it == event_reg().end() ? nullptr : it->second;
}

} // namespace fc

// ================================================================ exported API
// ---- streams
static cudaError_t stream_create(cudaStream_t *out, unsigned flags, int prio) {
  if (t_worker) return cudaErrorNotPermitted;
  if (!out) return cudaErrorInvalidValue;
  if (flags & ~(unsigned)cudaStreamNonBlocking) return cudaErrorInvalidValue;
  if (!dev_ok(t_device)) return cudaErrorInvalidDevice;
  legacy_of(t_device); // the legacy stream exists before any blocking stream's first task
  auto s = new_stream(t_device, flags, SK_USER, prio);
  std::lock_guard<std::mutex> l(g_reg_m);
  stream_reg()[s.get()] = s;
  *out = (cudaStream_t)s.get();
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *s) { FC_RET(stream_create(s, 0, 0)); }
FC_API cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f) {
  FC_RET(stream_create(s, f, 0));
}
FC_API cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int f, int prio) {
  FC_RET(stream_create(s, f, prio));
}

FC_API cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t h) {
  if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread) FC_RET(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> l(g_reg_m);
    auto it = stream_reg().find((void *)h);
    if (it == stream_reg().end()) FC_RET(cudaErrorInvalidResourceHandle);
    s = it->second;
    stream_reg().erase(it);
  }
  // Returns at once; the worker finishes the queued work, then exits (CUDA releases the
  // stream when the device has completed all work in it).
  std::lock_guard<std::mutex> l(s->m);
  s->dying = true;
  s->cv_work.notify_all();
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t h) {
  std::shared_ptr<Stream> s;
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  if (cudaError_t e = sticky(s->device)) FC_RET(e);
  bool busy;
  {
    std::lock_guard<std::mutex> l(s->m);
    busy = s->done < s->enq;
  }
  if (!busy && s->kind == SK_LEGACY) {
    // The legacy stream is also "busy" while blocking streams it would wait for are.
    Device &D = devs()[s->device];
    std::lock_guard<std::mutex> l(D.m);
    for (auto &w : D.streams) {
      auto b = w.lock();
      if (!b || !b->blocking()) continue;
      std::lock_guard<std::mutex> l2(b->m);
      if (b->done < b->enq) busy = true;
    }
  }
  return busy ? cudaErrorNotReady : cudaSuccess; // NotReady is not recorded as an error
}

FC_API cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t h) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  std::shared_ptr<Stream> s;
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  if (s->kind == SK_LEGACY) {
    // Synchronizing the legacy stream waits for what work issued to it now would wait for.
    uint64_t seq = enqueue(s, nullptr, false);
    wait_done(*s, seq);
  } else {
    sync_stream(s);
  }
  FC_RET(sticky(s->device));
}

FC_API cudaError_t CUDARTAPI cudaStreamGetFlags(cudaStream_t h, unsigned int *f) {
  std::shared_ptr<Stream> s;
  if (!f) FC_RET(cudaErrorInvalidValue);
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  *f = s->flags;
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaStreamGetPriority(cudaStream_t h, int *p) {
  std::shared_ptr<Stream> s;
  if (!p) FC_RET(cudaErrorInvalidValue);
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  *p = s->priority;
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaStreamGetDevice(cudaStream_t h, int *d) {
  std::shared_ptr<Stream> s;
  if (!d) FC_RET(cudaErrorInvalidValue);
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  *d = s->device;
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t h, cudaHostFn_t fn, void *user) {
  if (t_worker) FC_RET(cudaErrorNotPermitted); // "The host function must not make any CUDA API calls"
  if (!fn) FC_RET(cudaErrorInvalidValue);
  std::shared_ptr<Stream> s;
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  if (cudaError_t e = sticky(s->device)) FC_RET(e);
  enqueue(s, [fn, user] { fn(user); }, false);
  return cudaSuccess;
}

// ---- events
FC_API cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags) {
  if (!ev) FC_RET(cudaErrorInvalidValue);
  if (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess))
    FC_RET(cudaErrorInvalidValue);
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)) FC_RET(cudaErrorInvalidValue);
  if (!dev_ok(t_device)) FC_RET(cudaErrorInvalidDevice);
  auto e = std::make_shared<Event>();
  e->device = t_device;
  e->flags = flags;
  std::lock_guard<std::mutex> l(g_reg_m);
  event_reg()[e.get()] = e;
  *ev = (cudaEvent_t)e.get();
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *ev) { return cudaEventCreateWithFlags(ev, 0); }

FC_API cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t ev) {
  std::lock_guard<std::mutex> l(g_reg_m);
  if (!event_reg().erase((void *)ev)) FC_RET(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

static cudaError_t event_record(cudaEvent_t ev, cudaStream_t h) {
  if (t_worker) return cudaErrorNotPermitted;
  auto e = find_event(ev);
  if (!e) return cudaErrorInvalidResourceHandle;
  std::shared_ptr<Stream> s;
  if (cudaError_t r = resolve(h, &s)) return r;
  // "cudaEventRecord() will fail if the input event and input stream are associated to
  // different devices" (CUDA Programming Guide, multi-device system).
  if (s->device != e->device) return cudaErrorInvalidResourceHandle;
  if (cudaError_t r = sticky(s->device)) return r;
  auto cell = std::make_shared<std::atomic<int64_t>>(0);
  std::lock_guard<std::mutex> l(e->m);
  uint64_t seq = enqueue(s, [cell] { cell->store(now_ns()); }, false);
  e->s = s;
  e->seq = seq;
  e->t_ns = cell;
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t ev, cudaStream_t h) { FC_RET(event_record(ev, h)); }
FC_API cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t ev, cudaStream_t h, unsigned int) {
  FC_RET(event_record(ev, h));
}

FC_API cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t ev) {
  auto e = find_event(ev);
  if (!e) FC_RET(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Stream> s;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> l(e->m);
    s = e->s;
    seq = e->seq;
  }
  if (cudaError_t r = sticky(e->device)) FC_RET(r);
  if (!s) return cudaSuccess; // never recorded: complete
  return stream_done(*s) >= seq ? cudaSuccess : cudaErrorNotReady;
}

FC_API cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t ev) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  auto e = find_event(ev);
  if (!e) FC_RET(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Stream> s;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> l(e->m);
    s = e->s;
    seq = e->seq;
  }
  if (s) wait_done(*s, seq);
  FC_RET(sticky(e->device));
}

FC_API cudaError_t CUDARTAPI cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  if (!ms) FC_RET(cudaErrorInvalidValue);
  auto ea = find_event(a), eb = find_event(b);
  if (!ea || !eb) FC_RET(cudaErrorInvalidResourceHandle);
  if ((ea->flags | eb->flags) & cudaEventDisableTiming) FC_RET(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Stream> sa, sb;
  uint64_t qa, qb;
  std::shared_ptr<std::atomic<int64_t>> ta, tb;
  {
    std::lock_guard<std::mutex> l(ea->m);
    sa = ea->s, qa = ea->seq, ta = ea->t_ns;
  }
  {
    std::lock_guard<std::mutex> l(eb->m);
    sb = eb->s, qb = eb->seq, tb = eb->t_ns;
  }
  if (!sa || !sb) FC_RET(cudaErrorInvalidResourceHandle);
  if (stream_done(*sa) < qa || stream_done(*sb) < qb) return cudaErrorNotReady;
  *ms = (float)((double)(tb->load() - ta->load()) / 1e6);
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t ev, unsigned int flags) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  if (flags & ~(unsigned)cudaEventWaitExternal) FC_RET(cudaErrorInvalidValue);
  auto e = find_event(ev);
  if (!e) FC_RET(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Stream> s;
  if (cudaError_t r = resolve(h, &s)) FC_RET(r);
  std::shared_ptr<Stream> es;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> l(e->m);
    es = e->s;
    seq = e->seq;
  }
  if (!es) return cudaSuccess; // never recorded: nothing to wait for
  enqueue(s, nullptr, false, {{es, seq}});
  return cudaSuccess;
}

// ---- introspection (fakecuda.h)
FC_API int fakecuda_live_streams(void) {
  std::lock_guard<std::mutex> l(g_reg_m);
  return (int)stream_reg().size();
}
FC_API int fakecuda_live_events(void) {
  std::lock_guard<std::mutex> l(g_reg_m);
  return (int)event_reg().size();
}
