/* The library tuner each modeled system runs (tuner.c). Internal to the model. */
#ifndef UNILINK_MODEL_TUNER_H
#define UNILINK_MODEL_TUNER_H

#include "ul_model.h"

/* One candidate: latency (us), algorithm bandwidth (GB/s), the formula in words. */
typedef void (*ulsim_tuner_add_fn)(void *ctx, const char *algo, int proto, double lat_us,
                                   double algbw_gbps, const char *formula);

int ulsim_tuner_arch(const ulsim_topology_t *t);
int ulsim_tuner_channels(double ring_gbps);
int ulsim_tuner_ll128(const ulsim_topology_t *t);
void ulsim_tuner_allreduce(const ulsim_topology_t *t, const ulsim_bw_t *bw, double S,
                           ulsim_tuner_add_fn add, void *ctx);
#endif
