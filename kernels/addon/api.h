// What the addon's files share: the per-environment data and the functions behind the JS methods.
#pragma once
#include <napi.h>

#include "backend.h"

struct AddonData {
  Napi::FunctionReference backend_ctor;
  Napi::FunctionReference model_ctor;
  Napi::FunctionReference engine_ctor;
};

// Stand-alone layer kernels (kernels_api.cc), all synchronous except sgemmAsync. Names match the JS methods.
#define RS_KERNEL_METHODS(X)                                                                                      \
  X(embeddingFwd) X(embeddingBwd) X(rmsnormFwd) X(rmsnormBwd) X(residualRmsnormFwd) X(residualRmsnormBwd)        \
  X(sgemm) X(sgemmAsync) X(matmulFwd) X(matmulBwd) X(ropeFwd) X(ropeBwd) X(attentionFwd) X(attentionBwd)          \
  X(swigluFwd) X(swigluBwd) X(lossFwdBwd) X(gradNorm) X(adamw)

#define RS_DECLARE_KERNEL(name) Napi::Value kernel_##name(Backend* be, const Napi::CallbackInfo& info);
RS_KERNEL_METHODS(RS_DECLARE_KERNEL)
#undef RS_DECLARE_KERNEL

// model_api.cc: the JS class wrapping rs_model*, and its factory.
Napi::Function define_model_class(Napi::Env env);
Napi::Value create_model(Backend* be, const Napi::CallbackInfo& info);

// engine_api.cc: the JS class wrapping rs_engine*, created by the model it runs (model.createEngine).
struct EngineInit {
  Backend* be;
  rs_model* const* model;  // the model wrapper's pointer: NULL once the model is disposed
  bool* model_busy;        // the model wrapper's one-call-at-a-time flag, held during a step
  int max_seqs;
  int vocab;
};
Napi::Function define_engine_class(Napi::Env env);
Napi::Value create_engine(const EngineInit& init, Napi::Object model, const Napi::CallbackInfo& info);

// Reads the C loss spec from a JS object {kind, maskLow, maskHigh, clipEps, clipEpsHigh, klCoef, normalizer}.
class Args;
rs_loss_spec read_loss_spec(const Args& a, Napi::Object o);
Napi::Object loss_stats_object(Napi::Env env, const rs_loss_stats& s);

// comm.cc: the learner ranks' MPI collectives (`comm`; every call throws when the build has no MPI).
Napi::Object comm_exports(Napi::Env env);
// ZeRO-1 on a model's flat buffer of n floats split in `counts` (one per rank): the reduce-scatter leaves this rank's
// slice of the sum over ranks in place (the rest of buf is left as it was) and returns the slice's sum of squares;
// the all-gather fills every other rank's slice in place.
double comm_reduce_scatter_in_place(const Napi::Value& counts, float* buf, size_t n);
void comm_all_gather_in_place(const Napi::Value& counts, float* buf, size_t n);
