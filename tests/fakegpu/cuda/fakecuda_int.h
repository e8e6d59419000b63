// Internals of the fake CUDA runtime shared by its files (C++ only; the library's C face
// is the CUDA headers plus fakecuda.h). The files form layers, each calling only those
// listed before it: fakecuda_errors.cpp (configuration, errors), fakecuda_streams.cpp
// (streams, events), fakecuda_memory.cpp (allocations, copies, IPC), fakecuda_launch.cpp
// (kernels) and fakecuda_devices.cpp (device queries, peer access). Everything here is
// hidden: only the entry points marked FC_API are exported.
//
// Shape: several fake devices per process (FAKEGPU_GPUS), a per-thread current device,
// device memory from fakemem (the CPU cannot touch it), one worker thread per stream with a
// FIFO queue and CUDA's legacy-default-stream rules expressed as dependencies between tasks,
// events as (stream, sequence) marks, kernels dispatched by their registered device name to
// host implementations built on backends/cuda/cuda_elementops.cuh. Written from the CUDA 13
// headers' declarations and documented semantics only; README.md says what is faithful.
#ifndef UNILINK_FAKECUDA_INT_H
#define UNILINK_FAKECUDA_INT_H

#include <cuda_runtime_api.h>
#include <driver_types.h>
#include <vector_types.h>

#include <ctype.h>
#include <cxxabi.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "fakecuda.h"
#include "fakemem.h"

#define FC_API extern "C" __attribute__((visibility("default")))

// Record a failing result as the thread's last error and return it.
#define FC_RET(x) return fail(x)

namespace fc {

constexpr int kMaxDev = 64;

// ---------------------------------------------------------------- fakecuda_errors.cpp
struct Config {
  int ndev = 4;
  bool p2p = true;
  unsigned delay_us = 0;
  unsigned long long seed = 1;
  int driver_version = 13000;
  bool serialize = false; // debugging aid, not CUDA: one FIFO per device across all streams
};

const Config &cfg();
int64_t now_ns();

extern thread_local cudaError_t t_last;
extern thread_local int t_device;
extern thread_local bool t_worker; // stream worker threads (host functions run there)

// Record @e as this thread's last error (CUDA does so for every failing call).
cudaError_t fail(cudaError_t e);
bool dev_ok(int d);
// The sticky error of @dev (cudaSuccess when none), and setting it once.
cudaError_t sticky(int dev);
void set_sticky(int dev, cudaError_t e);

// ---------------------------------------------------------------- fakecuda_streams.cpp
struct Stream;
struct Dep {
  std::shared_ptr<Stream> s;
  uint64_t seq;
};
struct Task {
  std::function<void()> fn;
  std::vector<Dep> deps;
  uint64_t seq = 0;
  bool device_work = true; // kernels/copies/memsets: skipped once the device has a sticky error
};

enum StreamKind { SK_USER, SK_LEGACY, SK_PER_THREAD };

struct Stream : std::enable_shared_from_this<Stream> {
  int device = 0;
  unsigned flags = 0;
  int priority = 0;
  StreamKind kind = SK_USER;
  unsigned id = 0;
  std::mutex m;
  std::condition_variable cv_work, cv_done;
  std::deque<Task> q;
  uint64_t enq = 0;  // guarded by the device lock (and m for readers)
  uint64_t done = 0; // guarded by m
  bool dying = false;
  bool blocking() const { return kind != SK_LEGACY && !(flags & cudaStreamNonBlocking); }
};

struct Device {
  std::mutex m; // serializes enqueues on this device's streams (legacy dependencies)
  std::shared_ptr<Stream> legacy;
  std::vector<std::weak_ptr<Stream>> streams; // every stream of the device but the legacy one
  bool peer[kMaxDev] = {};
  std::shared_ptr<Stream> last; // FAKEGPU_SERIALIZE: the stream of the device's last task
  uint64_t last_seq = 0;
};

Device *devs();
void wait_done(Stream &s, uint64_t seq);
// Resolve a cudaStream_t: 0 and cudaStreamLegacy are the current device's legacy stream,
// cudaStreamPerThread this thread's blocking stream of the current device.
cudaError_t resolve(cudaStream_t h, std::shared_ptr<Stream> *out);
// Enqueue @fn on @s with the legacy default stream's implicit synchronization; returns the
// task's sequence number.
uint64_t enqueue(const std::shared_ptr<Stream> &s, std::function<void()> fn, bool device_work = true,
                 std::vector<Dep> extra = {});
// Wait for all work enqueued on @s (on every stream of @dev) so far.
void sync_stream(const std::shared_ptr<Stream> &s);
void sync_device(int dev);

// ---------------------------------------------------------------- fakecuda_memory.cpp
struct HostRange;
// The pinned range holding all of [p, p+n), if any.
bool host_find(const void *p, size_t n, HostRange *out);
// May a kernel on @dev touch device memory of region @r?
bool accessible(int dev, const fakemem_region_t &r);

} // namespace fc

#endif
