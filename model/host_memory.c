/* PCIe nodes without GPU peer-to-peer. When two GPUs cannot reach each other's memory
 * (GeForce cards, ACS/IOMMU setups, NCCL_P2P_DISABLE), NCCL routes the path through the
 * CPU (src/graph/paths.cc, "Divert all traffic through the CPU") and moves the data with
 * its SHM transport (src/transport/shm.cc): the FIFO sits in host memory (receiver side
 * by default, NCCL_SHM_LOCALITY), the sending GPU writes each byte into it and the
 * receiving GPU reads it back. A ring of g GPUs at bus bandwidth B therefore moves
 * 2 x g x B through host DRAM, which caps B at DRAM x efficiency / (2 g). */
#include "host_memory.h"
#include "assumed_list.h"
#include "model_err.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const hm_fields[] = {"sockets", "mt_per_s", "channels_per_socket",
                                        "bytes_per_transfer", "efficiency"};
#define HM_NFIELDS (sizeof hm_fields / sizeof hm_fields[0])

double ulsim_host_memory_gbps(const ulsim_host_memory_t *h) {
  if (!h) return 0;
  /* JEDEC arithmetic: MT/s x bytes per transfer = MB/s per channel */
  return h->sockets * h->channels_per_socket * h->mt_per_s * h->bytes_per_transfer / 1e3;
}

/* A required number in [lo, hi]; whole numbers only when @p integer. */
static int hm_num(const cJSON *o, const char *field, double lo, double hi, int integer,
                  double *out, const char *where, char *err, size_t errlen) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
  if (!v) {
    ulsim__err(err, errlen, "%s: missing field \"%s\" (host_memory needs sockets, "
               "channels_per_socket, mt_per_s, bytes_per_transfer and efficiency)", where, field);
    return -1;
  }
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
    ulsim__err(err, errlen, "%s: field \"%s\" must be a number", where, field);
    return -1;
  }
  double x = v->valuedouble;
  if (x < lo || x > hi) {
    ulsim__err(err, errlen, "%s: field \"%s\" = %g is out of range [%g, %g]", where, field, x,
               lo, hi);
    return -1;
  }
  if (integer && x != floor(x)) {
    ulsim__err(err, errlen, "%s: field \"%s\" must be a whole number (got %g)", where, field, x);
    return -1;
  }
  *out = x;
  return 0;
}

int ulsim__host_memory_parse(const cJSON *intra, ulsim_topology_t *t, const char *where, char *err,
                             size_t errlen) {
  const cJSON *p2p = cJSON_GetObjectItemCaseSensitive(intra, "p2p");
  const cJSON *hm = cJSON_GetObjectItemCaseSensitive(intra, "host_memory");
  t->no_p2p = 0;
  memset(&t->host_mem, 0, sizeof t->host_mem);
  if (p2p && !cJSON_IsBool(p2p)) {
    ulsim__err(err, errlen, "%s: field \"p2p\" must be true or false", where);
    return -1;
  }
  int off = p2p && cJSON_IsFalse(p2p);
  if (off && t->shape != ULSIM_SHAPE_BUS) {
    ulsim__err(err, errlen,
               "%s: \"p2p\": false is modeled for shape \"bus\" (PCIe) only: switch and mesh "
               "fabrics are peer-to-peer by construction", where);
    return -1;
  }
  if (off && !hm) {
    ulsim__err(err, errlen,
               "%s: \"p2p\": false needs a \"host_memory\" object (sockets, channels_per_socket, "
               "mt_per_s, bytes_per_transfer, efficiency): without P2P every ring byte is "
               "written to and read from host memory", where);
    return -1;
  }
  if (hm && !off) {
    ulsim__err(err, errlen,
               "%s: \"host_memory\" is used only with \"p2p\": false (with P2P the ring does "
               "not pass through host memory): add \"p2p\": false or remove it", where);
    return -1;
  }
  if (!off) return 0;
  char w[700];
  snprintf(w, sizeof w, "%s.host_memory", where);
  if (!cJSON_IsObject(hm)) {
    ulsim__err(err, errlen, "%s: must be an object", w);
    return -1;
  }
  /* a misspelled field would silently mean nothing: refuse unknown names */
  const cJSON *f;
  cJSON_ArrayForEach(f, hm) {
    int known = !strcmp(f->string, "assumed");
    for (size_t i = 0; i < HM_NFIELDS; i++) known |= !strcmp(f->string, hm_fields[i]);
    if (!known) {
      ulsim__err(err, errlen,
                 "%s: unknown field \"%s\" (known: sockets, channels_per_socket, mt_per_s, "
                 "bytes_per_transfer, efficiency, assumed)", w, f->string);
      return -1;
    }
  }
  ulsim_host_memory_t h;
  memset(&h, 0, sizeof h);
  double sockets, channels;
  if (hm_num(hm, "sockets", 1, 16, 1, &sockets, w, err, errlen) ||
      hm_num(hm, "channels_per_socket", 1, 64, 1, &channels, w, err, errlen) ||
      hm_num(hm, "mt_per_s", 100, 20000, 0, &h.mt_per_s, w, err, errlen) ||
      hm_num(hm, "bytes_per_transfer", 1, 64, 0, &h.bytes_per_transfer, w, err, errlen) ||
      hm_num(hm, "efficiency", 0.01, 1.0, 0, &h.efficiency, w, err, errlen) ||
      ulsim__assumed_parse(hm, h.assumed, sizeof h.assumed, ", ", w, hm_fields, HM_NFIELDS, err,
                           errlen))
    return -1;
  h.sockets = (int)sockets;
  h.channels_per_socket = (int)channels;
  t->no_p2p = 1;
  t->host_mem = h;
  return 0;
}

void ulsim__host_memory_write(const ulsim_topology_t *t, cJSON *intra) {
  if (!t->no_p2p) return;
  const ulsim_host_memory_t *h = &t->host_mem;
  cJSON_AddBoolToObject(intra, "p2p", 0);
  cJSON *o = cJSON_AddObjectToObject(intra, "host_memory");
  cJSON_AddNumberToObject(o, "sockets", h->sockets);
  cJSON_AddNumberToObject(o, "channels_per_socket", h->channels_per_socket);
  cJSON_AddNumberToObject(o, "mt_per_s", h->mt_per_s);
  cJSON_AddNumberToObject(o, "bytes_per_transfer", h->bytes_per_transfer);
  cJSON_AddNumberToObject(o, "efficiency", h->efficiency);
  if (h->assumed[0]) cJSON_AddItemToObject(o, "assumed", ulsim__split_list(h->assumed, ", "));
}

const char *ulsim_host_memory_explain(const ulsim_topology_t *t, const ulsim_bw_t *bw, char *buf,
                                      size_t len) {
  if (!buf || !len) return buf;
  buf[0] = 0;
  if (!t || !bw || !t->no_p2p || !(bw->host_cap > 0)) return buf;
  const ulsim_host_memory_t *h = &t->host_mem;
  int binds = bw->host_cap < bw->bus_ring;
  snprintf(buf, len,
           "host-memory cap (no P2P: NCCL SHM transport, each ring byte written to and read "
           "from host DRAM) %s: ring/pair/inject <= sockets x channels x MT/s x B/transfer x "
           "efficiency / (2 x GPUs) = %d x %d x %g MT/s x %g B x %g / (2 x %d) = %.2f GB/s %s "
           "PCIe %.2f GB/s%s%s",
           binds ? "BINDS" : "does not bind", h->sockets, h->channels_per_socket, h->mt_per_s,
           h->bytes_per_transfer, h->efficiency, bw->ppn, bw->host_cap, binds ? "<" : ">=",
           bw->bus_ring, h->assumed[0] ? "; assumed: " : "", h->assumed);
  return buf;
}
