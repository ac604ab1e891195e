// The generation schedule both backends follow: prefill the prompts in packs of up to ~4K tokens (one
// prompt may exceed that on its own), then decode steps over the still-active sequences until none is
// left. Gen provides prefill(pack, flat, offsets) and decode(active); Seq has P (prompt length) and done.
#pragma once
#include <cstdint>
#include <vector>

namespace rs_shared {

constexpr int kPrefillPack = 4096;

template <class Gen, class Seq>
void prefill_then_decode(Gen& gen, const std::vector<Seq*>& todo, const int32_t* flat, const int64_t* offsets) {
  for (size_t i = 0; i < todo.size();) {
    std::vector<Seq*> pack;
    int T = 0;
    while (i < todo.size() && (pack.empty() || T + todo[i]->P <= kPrefillPack)) {
      T += todo[i]->P;
      pack.push_back(todo[i++]);
    }
    gen.prefill(pack, flat, offsets);
  }
  for (;;) {
    std::vector<Seq*> active;
    for (Seq* s : todo)
      if (!s->done) active.push_back(s);
    if (active.empty()) break;
    gen.decode(active);
  }
}

}  // namespace rs_shared
