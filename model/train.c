/* Training-step estimator: compute from 6 N D, gradient synchronisation from the cost
 * model per bucket, overlap from the bucket schedule, and a memory check per ZeRO stage
 * (Rajbhandari et al. 2020, "ZeRO", section 5: 2P + 2P + K P bytes, K = 12 for mixed
 * precision Adam, sharded by stage). Activations are not counted (stated as such). */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "ul_model.h"
#include "model_err.h"


/* Backward is 4N of the 6N FLOPs per token (Kaplan et al. 2020). */
#define SIM_TRAIN_BACKWARD_SHARE (2.0 / 3.0)

double ulsim_train_memory_gb(double params, int zero, int dp, double pbytes, double gbytes,
                             double obytes) {
  double P = params, d = dp > 0 ? dp : 1;
  double p = pbytes * P, g = gbytes * P, o = obytes * P;
  switch (zero) {
    case 0: return (p + g + o) / 1e9;
    case 1: return (p + g + o / d) / 1e9;
    case 2: return (p + (g + o) / d) / 1e9;
    default: return (p + g + o) / d / 1e9;
  }
}

ul_result_t ulsim_train(const ulsim_topology_t *t, const ulsim_train_in_t *in,
                        ulsim_train_out_t *out, char *err, size_t errlen) {
  if (!t || !in || !out) return ulsim__err(err, errlen, "train: NULL argument");
  if (!(in->params > 0)) return ulsim__err(err, errlen, "train: --params must be > 0");
  if (in->gpus < 1) return ulsim__err(err, errlen, "train: --gpus must be >= 1");
  if (!(in->tokens_per_gpu > 0))
    return ulsim__err(err, errlen, "train: --tokens-per-gpu must be > 0");
  if (!(in->gpu_tflops > 0)) return ulsim__err(err, errlen, "train: --gpu-tflops must be > 0");
  if (!(in->mfu > 0 && in->mfu <= 1))
    return ulsim__err(err, errlen, "train: --mfu must be in (0, 1]");
  if (in->zero < 0 || in->zero > 3) return ulsim__err(err, errlen, "train: --zero must be 0..3");
  if (!(in->overlap <= 1) || (in->overlap < 0 && in->overlap != -1))
    return ulsim__err(err, errlen, "train: --overlap must be in [0, 1] (or omitted: derived)");
  if (!(in->grad_bytes > 0)) return ulsim__err(err, errlen, "train: gradient bytes must be > 0");
  int tp = in->tp > 0 ? in->tp : 1, pp = in->pp > 0 ? in->pp : 1;
  if (in->gpus % (tp * pp))
    return ulsim__err(err, errlen, "train: --gpus %d is not a multiple of tp x pp = %d", in->gpus,
                         tp * pp);
  memset(out, 0, sizeof *out);
  out->dp = in->gpus / (tp * pp);
  out->backward_share = SIM_TRAIN_BACKWARD_SHARE;
  double pb = in->param_bytes > 0 ? in->param_bytes : 2, ob = in->opt_bytes > 0 ? in->opt_bytes : 12;
  double shard = in->params / (tp * pp); /* parameters one GPU holds before ZeRO */
  out->mem_gb = ulsim_train_memory_gb(shard, in->zero, out->dp, pb, in->grad_bytes, ob);
  if (in->gpu_mem_gb > 0 && out->mem_gb > in->gpu_mem_gb)
    return ulsim__err(err, errlen,
                         "train: does not fit: ZeRO-%d needs %.1f GB per GPU for parameters, "
                         "gradients and optimizer state (%.3g params / tp %d / pp %d, dp %d) but "
                         "a GPU has %.1f GB; raise --zero, tp/pp or GPUs",
                         in->zero, out->mem_gb, in->params, tp, pp, out->dp, in->gpu_mem_gb);
  /* C = 6 N D (Kaplan et al. 2020): 2N forward + 4N backward per token */
  out->compute_s = 6.0 * shard * in->tokens_per_gpu / (in->gpu_tflops * 1e12 * in->mfu);
  double total = shard * in->grad_bytes;
  double bucket = in->bucket_bytes > 0 && in->bucket_bytes < total ? in->bucket_bytes : total;
  int nfull = (int)floor(total / bucket);
  double rem = total - nfull * bucket;
  if (rem < 1e-6 * bucket) rem = 0;
  out->nbuckets = nfull + (rem > 0);
  /* ZeRO-1/2 reduce-scatter gradients and all-gather parameters (same 2x volume as
   * allreduce); ZeRO-3 all-gathers parameters twice (forward and backward): 3x. */
  ul_coll_t colls[3];
  int ncoll = 0;
  if (in->zero == 0) colls[ncoll++] = UL_COLL_ALLREDUCE;
  else {
    colls[ncoll++] = UL_COLL_REDUCE_SCATTER;
    colls[ncoll++] = UL_COLL_ALLGATHER;
    if (in->zero == 3) colls[ncoll++] = UL_COLL_ALLGATHER;
  }
  double per_us = 0, rem_us = 0;
  for (int c = 0; c < ncoll && out->dp > 1; c++) {
    ulsim_cost_t cost;
    ul_result_t rc = ulsim_cost(t, colls[c], bucket, out->dp, NULL, &cost, err, errlen);
    if (rc != UL_OK) return rc;
    per_us += cost.time_us;
    if (c == 0) {
      snprintf(out->algorithm, sizeof out->algorithm, "%s", cost.algorithm);
      out->busbw_gbps = cost.busbw_gbps;
      snprintf(out->confidence, sizeof out->confidence, "%s", cost.confidence);
      snprintf(out->sources, sizeof out->sources, "%s", cost.sources);
    }
    if (rem > 0) {
      ulsim_cost_t rc2;
      rc = ulsim_cost(t, colls[c], rem, out->dp, NULL, &rc2, err, errlen);
      if (rc != UL_OK) return rc;
      rem_us += rc2.time_us;
    }
  }
  out->bucket_us = per_us;
  out->comm_s = (nfull * per_us + rem_us) * 1e-6;
  double bwd_s = out->compute_s * (in->zero == 3 ? 1.0 : SIM_TRAIN_BACKWARD_SHARE);
  if (out->dp <= 1) {
    out->comm_s = out->exposed_s = 0;
  } else if (in->overlap == -1) {
    /* Bucket schedule: bucket i is ready when backward has produced its gradients
     * ((i+1)/nb of backward, buckets filled in reverse layer order as DDP does) and the
     * buckets run one after another on the communication stream. */
    double done = 0;
    for (int i = 0; i < out->nbuckets; i++) {
      double ready = bwd_s * (i + 1) / out->nbuckets;
      double dur = (i == out->nbuckets - 1 && rem > 0 ? rem_us : per_us) * 1e-6;
      done = (done > ready ? done : ready) + dur;
    }
    out->exposed_s = done - bwd_s;
  } else if (in->overlap <= 0) {
    out->exposed_s = out->comm_s;
  } else {
    double last_s = (rem > 0 ? rem_us : per_us) * 1e-6;
    double rest = out->comm_s - last_s - in->overlap * bwd_s;
    out->exposed_s = (rest > 0 ? rest : 0) + last_s;
  }
  out->overlap_used = out->comm_s > 0 ? 1.0 - out->exposed_s / out->comm_s : 0;
  out->step_s = out->compute_s + out->exposed_s;
  out->efficiency = out->compute_s / out->step_s;
  return UL_OK;
}
