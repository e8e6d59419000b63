/* ze backend: communicators: bootstrap over the shm board, devices and links of the
 * ranks, init (one rank or all devices of a process), finalize, destroy, abort. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ze_internal.h"

static const ulbu_board_conf_t ze_board_conf = {"ze backend", "ulze", ZE_SLOT_BYTES, 0};

static uint64_t ze_host_hash(void) {
  char buf[512] = "";
  gethostname(buf, 255);
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    size_t l = strlen(buf);
    ssize_t n = read(fd, buf + l, sizeof(buf) - l - 1);
    if (n > 0) buf[l + (size_t)n] = '\0';
    close(fd);
  }
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *p = buf; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h;
}

static void ze_alloc_release(void *ptr, int tag, void *arg) {
  (void)tag, (void)arg;
  zeMemFree(ze_ctx, ptr);
}

/* Release everything the communicator made. Nothing the device may still touch is freed
 * until every list has drained (ze_list_drain); if one does not, device objects and
 * memory are leaked (a warning says so) and only host resources are released. */
static void ze_comm_free(ul_backend_comm_t *c) {
  if (!c) return;
  if (c->progress_started) {
    pthread_mutex_lock(&c->evlock);
    c->stop = 1;
    pthread_cond_broadcast(&c->evcond);
    pthread_mutex_unlock(&c->evlock);
    pthread_join(c->progress, NULL);
  }
  pthread_mutex_lock(&c->objlock);
  ul_backend_stream_t *streams = c->streams;
  ul_backend_window_t *windows = c->windows;
  c->streams = NULL;
  c->windows = NULL;
  int idle = ze_list_drain(c, c->internal.list);
  for (ul_backend_stream_t *s = streams; s; s = s->next)
    if (s->owned && !ze_list_drain(c, s->list)) idle = 0;
  pthread_mutex_unlock(&c->objlock);
  if (!idle)
    ul_backend_log(UL_LOG_WARN, "ze", "rank %d: the device is still running this communicator's "
                   "copies; its lists, events and memory are leaked, not freed under it", c->rank);
  /* Streams the caller never destroyed: their handles die with the communicator. */
  while (streams) {
    ul_backend_stream_t *next = streams->next;
    if (streams->owned && idle) zeCommandListDestroy(streams->list);
    pthread_mutex_destroy(&streams->lock);
    free(streams);
    streams = next;
  }
  /* Windows never deregistered (the generic layer's scratch window always): close the
   * peers' IPC mappings before our own memory goes. */
  while (windows) {
    ul_backend_window_t *next = windows->next;
    ze_window_free(c, windows, idle);
    windows = next;
  }
  if (idle) {
    if (c->internal.list) zeCommandListDestroy(c->internal.list);
    for (int i = 0; i <= ZE_NEVENTS; i++)
      if (c->ev[i]) zeEventDestroy(c->ev[i]);
    if (c->pool) zeEventPoolDestroy(c->pool);
    ulbu_alloc_list_destroy(&c->allocs, ze_alloc_release, NULL);
    if (c->stage_a) zeMemFree(ze_ctx, c->stage_a);
    if (c->stage_b) zeMemFree(ze_ctx, c->stage_b);
  } else {
    ulbu_alloc_list_destroy(&c->allocs, NULL, NULL);
  }
  ulbu_board_leave(&c->board);
  free(c->idents);
  free(c->peer_dev);
  free(c->links);
  pthread_mutex_destroy(&c->evlock);
  pthread_cond_destroy(&c->evcond);
  pthread_mutex_destroy(&c->stage_lock);
  pthread_mutex_destroy(&c->objlock);
  pthread_mutex_destroy(&c->internal.lock);
  free(c);
}

static int ze_find_device(const uint8_t *uuid) {
  for (int i = 0; i < ze_ndev; i++)
    if (memcmp(ze_devs[i].uuid, uuid, 16) == 0) return i;
  return -1;
}

/* Facts the driver gives about the path from local device a to local device b. */
static void ze_pair_facts(int a, int b, ulze_pair_facts_t *f) {
  ze_devinfo_t *da = &ze_devs[a], *db = &ze_devs[b];
  f->peer_visible = 1;
  f->same_device = a == b;
  if (a == b) return;
  f->sibling_tiles = da->root == db->root && da->sub >= 0 && db->sub >= 0;
  f->clock_mhz = da->clock_mhz;
  ze_bool_t can = 0;
  if (zeDeviceCanAccessPeer(da->h, db->h, &can) == ZE_RESULT_SUCCESS) f->can_access = can != 0;
  ze_device_p2p_bandwidth_exp_properties_t bw = {.stype = ZE_STRUCTURE_TYPE_DEVICE_P2P_BANDWIDTH_EXP_PROPERTIES};
  ze_device_p2p_properties_t pp = {.stype = ZE_STRUCTURE_TYPE_DEVICE_P2P_PROPERTIES};
  if (ze_have_bw_ext) pp.pNext = &bw;
  if (zeDeviceGetP2PProperties(da->h, db->h, &pp) == ZE_RESULT_SUCCESS) {
    f->p2p_flags = pp.flags;
    if (ze_have_bw_ext) {
      f->have_p2p_bw = 1;
      f->logical_bw = bw.logicalBandwidth;
      f->physical_bw = bw.physicalBandwidth;
      f->bw_unit = (uint32_t)bw.bandwidthUnit;
      f->logical_lat = bw.logicalLatency;
      f->physical_lat = bw.physicalLatency;
      f->lat_unit = (uint32_t)bw.latencyUnit;
    }
  }
  if (!ze_have_fabric_ext) return;
  ze_fabric_vertex_handle_t va = NULL, vb = NULL;
  if (zeDeviceGetFabricVertexExp(da->h, &va) != ZE_RESULT_SUCCESS ||
      zeDeviceGetFabricVertexExp(db->h, &vb) != ZE_RESULT_SUCCESS)
    return;
  uint32_t n = 0;
  if (zeFabricEdgeGetExp(va, vb, &n, NULL) != ZE_RESULT_SUCCESS || n == 0) return;
  ze_fabric_edge_handle_t edges[32];
  if (n > 32) n = 32;
  if (zeFabricEdgeGetExp(va, vb, &n, edges) != ZE_RESULT_SUCCESS || n == 0) return;
  ze_fabric_edge_exp_properties_t ep = {.stype = ZE_STRUCTURE_TYPE_FABRIC_EDGE_EXP_PROPERTIES};
  if (zeFabricEdgeGetPropertiesExp(edges[0], &ep) != ZE_RESULT_SUCCESS) return;
  f->nedges = (int)n;
  snprintf(f->edge_model, sizeof(f->edge_model), "%.31s", ep.model);
  f->edge_bw = ep.bandwidth;
  f->edge_bw_unit = (uint32_t)ep.bandwidthUnit;
  f->edge_lat = ep.latency;
  f->edge_lat_unit = (uint32_t)ep.latencyUnit;
}

ul_result_t ze_comm_init(const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                                ul_backend_comm_props_t *props) {
  *out = NULL;
  ulbu_token_id_t p;
  ul_result_t prc = ulbu_token_id_read(a, ZE_ID_MAGIC, "ze backend", "ze", &p);
  if (prc != UL_OK) return prc;
  int device = a->device != UL_CONFIG_UNDEF ? a->device : (ze_ndev ? a->rank % ze_ndev : 0);
  if (device < 0 || device >= ze_ndev)
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                                "ze backend: device %d out of range (%d visible)", device, ze_ndev);
  ul_backend_comm_t *c = calloc(1, sizeof(*c));
  if (!c) return ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "ze backend: out of memory");
  c->core = a->comm;
  c->rank = a->rank;
  c->nranks = a->nranks;
  c->timeout_ms = a->timeout_ms;
  c->abort_flag = a->abort_flag;
  ze_waiter_init(c);
  c->device = device;
  c->dev = ze_devs[device].h;
  c->internal.c = c;
  c->internal.probe = -1;
  ze_stream_lock_init(&c->internal);
  ulbu_alloc_list_init(&c->allocs);
  pthread_mutex_init(&c->evlock, NULL);
  pthread_cond_init(&c->evcond, NULL);
  pthread_mutex_init(&c->stage_lock, NULL);
  pthread_mutex_init(&c->objlock, NULL);
  snprintf(c->path, sizeof(c->path), "%s",
           ze_devs[device].copy_is_compute ? "copy-engine (compute)" : "copy-engine");
  ul_result_t rc = UL_OK;
  ze_result_t r;
  ze_slot_t mine, *all = NULL;
  if ((rc = ze_list_create(c, &c->internal.list)) != UL_OK) goto fail;
  ze_event_pool_desc_t pd = {ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, NULL, ZE_EVENT_POOL_FLAG_HOST_VISIBLE,
                             ZE_NEVENTS + 1};
  if ((r = zeEventPoolCreate(ze_ctx, &pd, 1, &c->dev, &c->pool)) != ZE_RESULT_SUCCESS) {
    rc = ze_fail(c, "zeEventPoolCreate", r);
    goto fail;
  }
  for (int i = 0; i <= ZE_NEVENTS; i++) {
    ze_event_desc_t ed = {ZE_STRUCTURE_TYPE_EVENT_DESC, NULL, (uint32_t)i, ZE_EVENT_SCOPE_FLAG_HOST,
                          ZE_EVENT_SCOPE_FLAG_HOST};
    if ((r = zeEventCreate(c->pool, &ed, &c->ev[i])) != ZE_RESULT_SUCCESS) {
      rc = ze_fail(c, "zeEventCreate", r);
      goto fail;
    }
  }
  for (int i = 0; i < ZE_NEVENTS; i++) c->ev_free[c->ev_nfree++] = ZE_NEVENTS - 1 - i;
  if (pthread_create(&c->progress, NULL, ze_progress_main, c) != 0) {
    rc = ul_backend_set_error(a->comm, UL_ERR_SYSTEM, "ze backend: cannot start progress thread");
    goto fail;
  }
  c->progress_started = 1;
  c->idents = calloc((size_t)c->nranks, sizeof(*c->idents));
  c->peer_dev = calloc((size_t)c->nranks, sizeof(int));
  c->links = calloc((size_t)c->nranks, sizeof(*c->links));
  all = calloc((size_t)c->nranks, sizeof(*all));
  if (!c->idents || !c->peer_dev || !c->links || !all) {
    rc = ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "ze backend: out of memory");
    goto fail;
  }
  if ((rc = ulbu_board_join(&c->board, &ze_board_conf, &c->waiter, c->core, c->rank, c->nranks,
                           p.token)) != UL_OK)
    goto fail;
  memset(&mine, 0, sizeof(mine));
  mine.ident.host_hash = ze_host_hash();
  mine.ident.pid = (int32_t)getpid();
  mine.ident.device = device;
  memcpy(mine.ident.uuid, ze_devs[device].uuid, 16);
  mine.ident.root = ze_devs[device].root;
  mine.ident.sub = ze_devs[device].sub;
  if ((rc = ze_allgather(c, &mine, all, "comm init")) != UL_OK) goto fail;
  mine.p2p_ok = 1;
  c->same_process = 1;
  for (int q = 0; q < c->nranks; q++) {
    c->idents[q] = all[q].ident;
    if (all[q].ident.pid != mine.ident.pid) c->same_process = 0;
    ulze_pair_facts_t f;
    memset(&f, 0, sizeof(f));
    f.self = q == c->rank;
    f.same_host = all[q].ident.host_hash == mine.ident.host_hash;
    int d = f.same_host ? ze_find_device(all[q].ident.uuid) : -1;
    c->peer_dev[q] = d;
    if (!f.self && d >= 0) ze_pair_facts(device, d, &f);
    c->links[q].peer = q;
    ulze_describe_pair(&f, &c->links[q]);
    if (f.self || f.same_device) continue;
    if (!f.same_host) {
      mine.p2p_ok = 0;
      snprintf(mine.why, sizeof(mine.why), "rank %d is on another host; the ze backend connects "
               "GPUs of one host (use mpi across hosts)", q);
    } else if (d < 0 || !f.can_access) {
      mine.p2p_ok = 0;
      snprintf(mine.why, sizeof(mine.why), "device %d (rank %d) cannot access the device of rank "
               "%d (zeDeviceCanAccessPeer); ze backend v1 needs peer access", device, c->rank, q);
    }
  }
  /* Agree: every rank fails with the same sentence if one pair lacks peer access. */
  if ((rc = ze_allgather(c, &mine, all, "comm init")) != UL_OK) goto fail;
  for (int q = 0; q < c->nranks; q++)
    if (!all[q].p2p_ok) {
      all[q].why[sizeof(all[q].why) - 1] = '\0';
      rc = ul_backend_set_error(a->comm, UL_ERR_UNSUPPORTED, "ze backend: %s", all[q].why);
      goto fail;
    }
  ul_backend_log(UL_LOG_INFO, "ze", "rank %d: device %d (%s), %s", c->rank, device,
                 ze_devs[device].name, c->path);
  free(all);
  if (props) {
    props->load_store_peers = 0; /* device memory: the host cannot load/store it */
    snprintf(props->path, sizeof(props->path), "%s", c->path);
    /* ABI 1.1: the device chosen here, so that a split child stays on it */
    if (props->struct_size >= offsetof(ul_backend_comm_props_t, device) + sizeof(props->device))
      props->device = device;
  }
  *out = c;
  return UL_OK;
fail:
  free(all);
  ze_comm_free(c);
  return rc;
}

typedef struct ze_init_job {
  ul_backend_comm_args_t args;
  ul_backend_comm_t **out;
  ul_backend_comm_props_t *props;
  ul_result_t rc;
} ze_init_job_t;

static void *ze_init_thread(void *arg) {
  ze_init_job_t *j = arg;
  j->rc = ze_comm_init(&j->args, j->out, j->props);
  return NULL;
}

/* One process, several devices: a fresh id and one joining thread per rank. */
ul_result_t ze_comm_init_all(const ul_backend_comm_args_t *args, int ndev,
                                    ul_backend_comm_t **out, ul_backend_comm_props_t *props) {
  unsigned char payload[UL_BACKEND_ID_PAYLOAD_BYTES];
  ul_result_t rc = ze_get_unique_id(payload, sizeof(payload));
  if (rc != UL_OK) return rc;
  ze_init_job_t *jobs = calloc((size_t)ndev, sizeof(*jobs));
  pthread_t *th = calloc((size_t)ndev, sizeof(*th));
  int *started = calloc((size_t)ndev, sizeof(int));
  if (!jobs || !th || !started) {
    free(jobs), free(th), free(started);
    return ul_backend_set_error(args[0].comm, UL_ERR_NO_MEMORY, "ze backend: out of memory");
  }
  for (int i = 0; i < ndev; i++) {
    jobs[i].args = args[i];
    jobs[i].args.id_payload = payload;
    jobs[i].args.id_payload_bytes = sizeof(payload);
    jobs[i].out = &out[i];
    jobs[i].props = &props[i];
    started[i] = pthread_create(&th[i], NULL, ze_init_thread, &jobs[i]) == 0;
    if (!started[i]) jobs[i].rc = ul_backend_set_error(args[i].comm, UL_ERR_SYSTEM,
                                                       "ze backend: pthread_create failed");
  }
  for (int i = 0; i < ndev; i++)
    if (started[i]) pthread_join(th[i], NULL);
  for (int i = 0; i < ndev && rc == UL_OK; i++) rc = jobs[i].rc;
  if (rc != UL_OK)
    for (int i = 0; i < ndev; i++)
      if (out[i]) {
        ze_comm_free(out[i]);
        out[i] = NULL;
      }
  free(jobs), free(th), free(started);
  return rc;
}

ul_result_t ze_comm_finalize(ul_backend_comm_t *c) {
  struct ul_backend_stream *st = ze_lock(c, NULL);
  ul_result_t rc = ze_list_sync(c, st, c->timeout_ms);
  ze_unlock(st);
  if (rc != UL_OK) return rc;
  return ulbu_board_barrier(&c->board, "comm finalize");
}

ul_result_t ze_comm_destroy(ul_backend_comm_t *c) {
  ze_comm_free(c);
  return UL_OK;
}

ul_result_t ze_comm_abort(ul_backend_comm_t *c) {
  c->dead = 1;
  pthread_mutex_lock(&c->evlock);
  pthread_cond_broadcast(&c->evcond);
  pthread_mutex_unlock(&c->evlock);
  return UL_OK;
}

ul_result_t ze_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out) {
  *out = c->links[peer];
  out->peer = peer;
  return UL_OK;
}
