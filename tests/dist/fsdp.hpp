// Sharded training (dist::FullyShard) on real ranks, included by dist.cpp: a GPT-like struct
// model (embedding tied to the head, blocks in a std::vector, a 0-dim leaf, sizes that cut
// unevenly and into empty shards) trained for a few Adam steps on every rank's slice of one
// batch, against the same steps on the whole batch in one process.
#pragma once

namespace fs_test {

struct Attn {
  torch::Tensor qkv, proj;
};
struct Block {
  torch::Tensor ln_w, ln_b;
  Attn attn;
  torch::Tensor fc, fc_b, out;
};
struct Gpt {
  torch::Tensor wte, wpe;
  std::vector<Block> blocks;
  torch::Tensor lnf_w, lnf_b, head, temperature;  // head: wte itself (tied)
  std::string name = "gpt";
  using tied_weights = td::ties<td::tie<"head", "wte">>;
};

constexpr int64_t vocab = 37, ctx = 7, width = 12, seqs = 12;

static Gpt make_gpt(int nblocks) {
  torch::manual_seed(11);
  Gpt m;
  m.wte = at::randn({vocab, width}) * 0.3;
  m.wpe = at::randn({ctx, width}) * 0.1;
  for (int i = 0; i < nblocks; ++i) {
    Block b;
    b.ln_w = 1 + 0.1 * at::randn({width});
    b.ln_b = 0.1 * at::randn({width});
    b.attn = {at::randn({width, 3 * width}) * 0.2, at::randn({width, width}) * 0.2};
    b.fc = at::randn({width, 2 * width}) * 0.2;
    b.fc_b = 0.1 * at::randn({2 * width});
    b.out = at::randn({2 * width, width}) * 0.2;
    m.blocks.push_back(b);
  }
  m.lnf_w = at::ones({width});
  m.lnf_b = at::zeros({width});
  m.head = m.wte;
  m.temperature = at::ones({});
  return m;
}

static torch::Tensor block_forward(const Block& b, const torch::Tensor& h) {
  const int64_t t = h.size(1);
  auto x = at::layer_norm(h, {width}, b.ln_w, b.ln_b);
  auto qkv = at::matmul(x, b.attn.qkv).chunk(3, -1);
  auto att = at::matmul(qkv[0], qkv[1].transpose(-1, -2)) / std::sqrt(static_cast<double>(width));
  att = att.masked_fill(at::ones({t, t}, at::kBool).triu(1), -1e9).softmax(-1);
  auto y = h + at::matmul(at::matmul(att, qkv[2]), b.attn.proj);
  auto z = at::layer_norm(y, {width}, b.ln_w, b.ln_b);
  return y + at::matmul(at::gelu(at::matmul(z, b.fc) + b.fc_b), b.out);
}

static torch::Tensor embed(const Gpt& m, const torch::Tensor& tokens) {
  return m.wte.index_select(0, tokens.reshape({-1})).view({tokens.size(0), tokens.size(1), width}) +
         m.wpe.narrow(0, 0, tokens.size(1));
}
static torch::Tensor loss_of(const Gpt& m, const torch::Tensor& h, const torch::Tensor& targets) {
  auto logits = at::matmul(at::layer_norm(h, {width}, m.lnf_w, m.lnf_b), m.head.t()) / m.temperature;
  return at::cross_entropy_loss(logits.reshape({-1, vocab}), targets.reshape({-1}));
}

// One step's loss on this rank's slice: the root unit gathered by `forward`, each block by `unit`.
static torch::Tensor sharded_loss(dist::FullyShard<Gpt>& fsdp, const Gpt& p, const torch::Tensor& x, const torch::Tensor& y) {
  return fsdp.forward(p, [&](const Gpt& root) {
    auto h = embed(root, x);
    for (std::size_t i = 0; i < root.blocks.size(); ++i) {
      h = fsdp.unit(i + 1, [&](const Gpt& m) { return block_forward(m.blocks[i], h); });
    }
    return loss_of(root, h, y);
  });
}

// One process, the whole model.
static torch::Tensor loss_full(const Gpt& m, const torch::Tensor& tokens, const torch::Tensor& targets) {
  auto h = embed(m, tokens);
  for (const auto& b : m.blocks) h = block_forward(b, h);
  return loss_of(m, h, targets);
}

// The batch of step `s` (every rank draws the same one and takes its slice).
static std::pair<torch::Tensor, torch::Tensor> batch(int s) {
  auto g = at::arange(seqs * (ctx + 1), at::kLong).reshape({seqs, ctx + 1});
  auto tokens = (g * (s + 3) + g.pow(2) * 7 + s).remainder(vocab);
  return {tokens.narrow(1, 0, ctx), tokens.narrow(1, 1, ctx)};
}

static double max_diff(const Gpt& a, const Gpt& b) {
  double d = 0;
  auto la = td::leaves(a), lb = td::leaves(b);
  for (std::size_t i = 0; i < la.size(); ++i) d = std::max(d, (la[i] - lb[i]).abs().max().item<double>());
  return d;
}

static int64_t tree_bytes(const Gpt& m) {
  int64_t n = 0;
  for (const auto& [k, x] : td::named_leaves(m)) {
    if (k != "head" && x.defined()) n += x.numel() * static_cast<int64_t>(x.element_size());
  }
  return n;
}

}  // namespace fs_test

// Every sharding on `w.size` ranks, plain autograd and td::value_and_grad, Adam with the
// model's global clip_grad_norm, against one process on the whole batch.
static int scenario_fsdp(const World& w) {
  using namespace fs_test;
  auto g = join(w, 60s);
  const int nblocks = 3, steps = 4;
  const Gpt init = make_gpt(nblocks);
  auto opt = td::optim::chain(td::optim::clip_grad_norm(0.5), td::optim::adam({.lr = 1e-2}));
  // The reference: one process, the whole batch.
  Gpt ref = td::clone(init);
  td::tie_weights(ref);
  std::vector<double> ref_losses;
  {
    auto state = opt.init(ref);
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = batch(s);
      auto [loss, grads] = td::value_and_grad([&](const Gpt& p) { return loss_full(p, x, y); })(ref);
      ref_losses.push_back(loss.item<double>());
      opt.step(ref, grads, state);
    }
  }
  for (auto sharding : {dist::Sharding::full, dist::Sharding::grad_op, dist::Sharding::optimizer}) {
    for (bool plain_autograd : {false, true}) {
      dist::FullyShard<Gpt> fsdp(g, init, {.units = {"blocks.*"}, .sharding = sharding});
      EXPECT(fsdp.units().size() == static_cast<std::size_t>(nblocks + 1));
      EXPECT(fsdp.units()[2] == "blocks.1");
      Gpt shards = fsdp.shard(init);
      // FSDP2's cut: torch.chunk's sizes, the last ranks short or empty.
      const auto cut = fsdp.rows("wte");
      const int64_t chunk = (vocab + w.size - 1) / w.size;
      EXPECT(cut.start == std::min<int64_t>(vocab, chunk * w.rank));
      EXPECT(shards.wte.size(0) == std::max<int64_t>(0, std::min<int64_t>(chunk, vocab - chunk * w.rank)));
      EXPECT(shards.head.is_same(shards.wte));  // the tie survives
      EXPECT(shards.temperature.dim() == 0);
      auto sharded_opt = td::optim::chain(fsdp.clip_grad_norm(0.5), td::optim::adam({.lr = 1e-2}));
      auto state = sharded_opt.init(shards);
      const int64_t per = seqs / w.size;
      for (int s = 0; s < steps; ++s) {
        auto [x_all, y_all] = batch(s);
        auto x = x_all.narrow(0, per * w.rank, per), y = y_all.narrow(0, per * w.rank, per);
        auto fwd = [&](const Gpt& p) { return sharded_loss(fsdp, p, x, y); };
        torch::Tensor loss;
        Gpt grads;
        if (plain_autograd) {
          td::requires_grad_(shards);
          loss = fwd(shards);
          loss.backward();
          grads = td::apply(shards, [](const torch::Tensor& t) { return t.grad().clone(); });
          td::for_each(shards, [](torch::Tensor& t) {
            t.mutable_grad() = torch::Tensor();
            t.requires_grad_(false);
          });
        } else {
          std::tie(loss, grads) = td::value_and_grad(fwd)(shards);
        }
        // Each rank's loss is its slice's; their mean is the whole batch's.
        auto mean = loss.detach().reshape({1}).clone();
        std::vector<at::Tensor> v{mean};
        g.c10d().allreduce(v)->wait();
        const double got = mean.item<double>() / w.size;
        if (std::abs(got - ref_losses[s]) > 1e-5) {
          throw std::runtime_error("step " + std::to_string(s) + ": loss " + std::to_string(got) + ", one process " +
                                   std::to_string(ref_losses[s]));
        }
        EXPECT(grads.wte.sizes() == shards.wte.sizes());
        sharded_opt.step(shards, grads, state);
        EXPECT(fsdp.gathered_bytes() == 0);  // every gathered unit freed
      }
      const Gpt whole = fsdp.unshard(shards);
      EXPECT(whole.head.is_same(whole.wte));
      const double d = max_diff(whole, ref);
      if (d > 1e-5) throw std::runtime_error("weights differ from one process by " + std::to_string(d));
      // Memory: the shards are 1/N of the model; a step held at most the root and two blocks whole.
      const int64_t model = tree_bytes(init);
      const int64_t block = tree_bytes(Gpt{{}, {}, {init.blocks[0]}, {}, {}, {}, {}, ""});
      const int64_t root = model - nblocks * block;
      // (A unit's message pads each leaf to whole chunks of rows on every rank: a few hundred bytes.)
      if (sharding == dist::Sharding::full) EXPECT(fsdp.peak_gathered_bytes() <= root + 2 * block + 1024);
      EXPECT(tree_bytes(shards) <= model / w.size + 4096);
      std::cout << "sharding " << static_cast<int>(sharding) << (plain_autograd ? " autograd" : " value_and_grad")
                << ": peak gathered " << fsdp.peak_gathered_bytes() << " of " << model << " bytes, sent "
                << fsdp.bytes_sent() << std::endl;
    }
  }
  // Misuse: a unit outside forward, a pattern that names nothing, a shard of the wrong shape.
  dist::FullyShard<Gpt> fsdp(g, init, {.units = {"blocks.*"}});
  Gpt shards = fsdp.shard(init);
  try {
    (void)fsdp.unit(1, [](const Gpt&) { return 0; });
    EXPECT(false);
  } catch (const td::Error& e) {
    EXPECT(std::string(e.what()).find("inside forward") != std::string::npos);
  }
  try {
    dist::FullyShard<Gpt> bad(g, init, {.units = {"layers.*"}});
    EXPECT(false);
  } catch (const td::Error& e) {
    EXPECT(std::string(e.what()).find("layers.*") != std::string::npos);
  }
  try {
    Gpt wrong = td::clone(shards);
    wrong.blocks[1].fc = at::zeros({width + 1, 2 * width});
    (void)fsdp.forward(wrong, [](const Gpt&) { return 0; });
    EXPECT(false);
  } catch (const td::Error& e) {
    EXPECT(std::string(e.what()).find("blocks.1.fc") != std::string::npos);
  }
  // A model that differs across ranks: named before any leaf moves.
  Gpt other = td::clone(init);
  if (w.rank == 1) other.blocks[2].out = at::zeros({2 * width, width + 1});
  try {
    dist::FullyShard<Gpt> bad(g, other, {.units = {"blocks.*"}});
    EXPECT(false);
  } catch (const dist::StructureError& e) {
    EXPECT(std::string(e.what()).find("blocks.2.out") != std::string::npos);
  }
  std::cout << "fsdp ok" << std::endl;
  return 0;
}

// One process trained `steps` Adam steps on the whole batches: what sharded training must match.
static fs_test::Gpt one_process(const fs_test::Gpt& init, int steps) {
  using namespace fs_test;
  auto opt = td::optim::adam({.lr = 1e-2});
  Gpt ref = td::clone(init);
  td::tie_weights(ref);
  auto state = opt.init(ref);
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(s);
    opt.step(ref, td::grad([&](const Gpt& p) { return loss_full(p, x, y); })(ref), state);
  }
  return ref;
}

// Sharded Adam steps `from` to `to` on this rank's slice of each batch.
template <class State>
static void sharded_steps(const World& w, dist::FullyShard<fs_test::Gpt>& fsdp, fs_test::Gpt& shards, State& state,
                          int from, int to) {
  using namespace fs_test;
  auto opt = td::optim::adam({.lr = 1e-2});
  const int64_t per = seqs / w.size;
  for (int s = from; s < to; ++s) {
    auto [x_all, y_all] = batch(s);
    auto x = x_all.narrow(0, per * w.rank, per), y = y_all.narrow(0, per * w.rank, per);
    auto grads = td::grad([&](const Gpt& p) { return sharded_loss(fsdp, p, x, y); })(shards);
    opt.step(shards, grads, state);
  }
}

// Three steps on 2 ranks, then every rank writes its rows of the model and of Adam's moments.
static int scenario_fsdp_save(const World& w) {
  using namespace fs_test;
  auto g = join(w, 60s);
  const std::filesystem::path dir = std::getenv("TDCPP_FSDP_CKPT");
  const Gpt init = make_gpt(3);
  dist::FullyShard<Gpt> fsdp(g, init, {.units = {"blocks.*"}});
  Gpt shards = fsdp.shard(init);
  auto state = td::optim::adam({.lr = 1e-2}).init(shards);
  sharded_steps(w, fsdp, shards, state, 0, 3);
  dist::save_dcp(g, shards, dir / "model", {.shard_dim = fsdp.shard_dim()});
  dist::save_dcp(g, state, dir / "optim", {.shard_dim = fsdp.shard_dim()});
  std::cout << "fsdp save ok" << std::endl;
  return 0;
}

// The checkpoint read on 3 ranks, cut for 3, two more steps: one process's five steps.
static int scenario_fsdp_resume(const World& w) {
  using namespace fs_test;
  auto g = join(w, 60s);
  const std::filesystem::path dir = std::getenv("TDCPP_FSDP_CKPT");
  const Gpt init = make_gpt(3);
  dist::FullyShard<Gpt> fsdp(g, init, {.units = {"blocks.*"}});
  Gpt whole = td::load_dcp<Gpt>(dir / "model");
  EXPECT(whole.head.is_same(whole.wte));
  Gpt shards = fsdp.shard(whole);
  auto state = td::load_dcp<td::optim::AdamState<Gpt>>(dir / "optim");
  EXPECT(state.step.item<int64_t>() == 3);
  state.exp_avg = fsdp.shard(state.exp_avg);
  state.exp_avg_sq = fsdp.shard(state.exp_avg_sq);
  sharded_steps(w, fsdp, shards, state, 3, 5);
  const double d = max_diff(fsdp.unshard(shards), one_process(init, 5));
  if (d > 1e-5) throw std::runtime_error("resumed weights differ from one process by " + std::to_string(d));
  std::cout << "fsdp resume ok" << std::endl;
  return 0;
}

// Rank 1 dies inside the second block's forward (or, with TDCPP_FSDP_DIE=backward, between the
// forward and the backward): the others fail within the timeout, with an error that names the
// reporting rank and the unit whose collective failed (the forward's last gather may already
// have been sent ahead, so the failure may come in the backward, through autograd), and rank 1
// alone as the one that does not answer. With TDCPP_FSDP_DIE=forward_late, rank 2 is also
// 4 seconds late into its next collective: rank 0 may see the failure first, and must still
// not name rank 2, which is alive. Rank 0 serves the store, so it stays until the others have
// asked it.
static int scenario_fsdp_dead(const World& w) {
  const std::string when = std::getenv("TDCPP_FSDP_DIE") ? std::getenv("TDCPP_FSDP_DIE") : "forward";
  const bool in_backward = when == "backward";
  using namespace fs_test;
  auto g = join(w, 10s);
  const Gpt init = make_gpt(3);
  dist::FullyShard<Gpt> fsdp(g, init, {.units = {"blocks.*"}});
  Gpt shards = fsdp.shard(init);
  auto [x, y] = batch(0);
  const auto start = std::chrono::steady_clock::now();
  std::string what;
  try {
    (void)td::grad([&](const Gpt& p) {
      auto loss = fsdp.forward(p, [&](const Gpt& root) {
        auto h = embed(root, x);
        for (int i = 0; i < 3; ++i) {
          h = fsdp.unit(static_cast<std::size_t>(i + 1), [&](const Gpt& m) {
            if (w.rank == 1 && i == 1 && !in_backward) std::_Exit(3);
            if (w.rank == 2 && i == 1 && when == "forward_late") std::this_thread::sleep_for(4s);
            return block_forward(m.blocks[i], h);
          });
        }
        return loss_of(root, h, y);
      });
      if (w.rank == 1 && in_backward) std::_Exit(3);
      return loss;
    })(shards);
  } catch (const dist::Error& e) {
    what = e.what();
  }
  const auto took = std::chrono::steady_clock::now() - start;
  const std::string done = "tdcpp/test/fsdp_dead_done";
  g.store()->add(done, 1);
  if (w.rank == 0) {
    while (g.store()->add(done, 0) < w.size - 1 && std::chrono::steady_clock::now() - start < 60s) {
      std::this_thread::sleep_for(50ms);
    }
  }
  if (what.empty()) {
    std::cout << "the step went through without rank 1" << std::endl;
    return 1;
  }
  std::cout << what << std::endl;
  EXPECT(what.find("(unit 'blocks.") != std::string::npos || what.find("(the root unit)") != std::string::npos);
  EXPECT(what.find("rank " + std::to_string(w.rank) + " of 3") != std::string::npos);
  // The dead rank, and no other, found through the store the ranks met in.
  EXPECT(what.find("; rank 1 does not answer") != std::string::npos);
  EXPECT(took < 30s);
  std::cout << "fsdp dead ok" << std::endl;
  return 0;
}

// Against Python's fully_shard (tests/dist/fsdp_python.py, run first on as many ranks): the same
// initial weights and batches; every step's loss and the final weights agree within 1e-5, and
// so do one process's.
static int scenario_fsdp_python(const World& w) {
  using namespace fs_test;
  auto g = join(w, 60s);
  const std::filesystem::path dir = std::getenv("TDCPP_FSDP_PY");
  // Python's file holds the tensors, not the struct's static field (`name`): loaded non-strict,
  // then checked to have filled every leaf.
  auto load = [](const std::filesystem::path& p) {
    Gpt m = td::load_safetensors<Gpt>(p, {.strict = false});
    for (const auto& [k, x] : td::named_leaves(m)) {
      if (!x.defined()) throw std::runtime_error(p.string() + ": no tensor '" + std::string(k) + "'");
    }
    return m;
  };
  const Gpt init = load(dir / "init.safetensors");
  EXPECT(init.head.is_same(init.wte));
  EXPECT(init.temperature.sizes() == c10::IntArrayRef({1}));
  std::ifstream f(dir / "losses.json");
  std::stringstream text;
  text << f.rdbuf();
  const td::Json py_losses = td::Json::parse(text.str());
  const int steps = static_cast<int>(py_losses.size());
  dist::FullyShard<Gpt> fsdp(g, init, {.units = {"blocks.*"}});
  Gpt shards = fsdp.shard(init);
  auto opt = td::optim::adam({.lr = 1e-2});
  auto state = opt.init(shards);
  Gpt ref = td::clone(init);
  td::tie_weights(ref);
  auto ref_state = opt.init(ref);
  const int64_t per = seqs / w.size;
  double worst = 0;
  for (int s = 0; s < steps; ++s) {
    auto [x_all, y_all] = batch(s);
    auto x = x_all.narrow(0, per * w.rank, per), y = y_all.narrow(0, per * w.rank, per);
    auto [loss, grads] = td::value_and_grad([&](const Gpt& p) { return sharded_loss(fsdp, p, x, y); })(shards);
    opt.step(shards, grads, state);
    auto mean = loss.detach().reshape({1}).clone();
    std::vector<at::Tensor> v{mean};
    g.c10d().allreduce(v)->wait();
    const double got = mean.item<double>() / w.size, py = py_losses[static_cast<std::size_t>(s)].get<double>();
    auto [ref_loss, ref_grads] = td::value_and_grad([&](const Gpt& p) { return loss_full(p, x_all, y_all); })(ref);
    opt.step(ref, ref_grads, ref_state);
    worst = std::max({worst, std::abs(got - py), std::abs(ref_loss.item<double>() - py)});
    if (worst > 1e-5) {
      throw std::runtime_error("step " + std::to_string(s) + ": loss " + std::to_string(got) + ", Python's fully_shard " +
                               std::to_string(py) + ", one process " + std::to_string(ref_loss.item<double>()));
    }
  }
  const Gpt py_final = load(dir / "final.safetensors");
  const double dw = max_diff(fsdp.unshard(shards), py_final), dr = max_diff(ref, py_final);
  if (dw > 1e-5 || dr > 1e-5) {
    throw std::runtime_error("final weights differ from Python's fully_shard by " + std::to_string(dw) +
                             " (one process: " + std::to_string(dr) + ")");
  }
  std::cout << steps << " steps on " << w.size << " ranks: losses within " << worst << ", weights within " << dw
            << " of Python's fully_shard\nfsdp python ok" << std::endl;
  return 0;
}

// The model of fsdp_python.py: its temperature is [1], since FSDP2 shards no 0-dim parameter.
static fs_test::Gpt torch_gpt() {
  fs_test::Gpt m = fs_test::make_gpt(3);
  m.temperature = at::ones({1});
  return m;
}

// Three sharded Adam steps, then this rank's part of get_state_dict's layout written as DCP: what
// Python's FSDP2 ranks read with dcp.load (fsdp_python.py resume).
static int scenario_fsdp_torch_save(const World& w) {
  using namespace fs_test;
  auto g = join(w, 60s);
  const std::filesystem::path dir = std::getenv("TDCPP_FSDP_CKPT");
  const Gpt init = torch_gpt();
  dist::FullyShard<Gpt> fsdp(g, init, {.units = {"blocks.*"}});
  Gpt shards = fsdp.shard(init);
  const td::optim::AdamOptions options{.lr = 1e-2};
  auto state = td::optim::adam(options).init(shards);
  sharded_steps(w, fsdp, shards, state, 0, 3);
  const td::TensorDict sd = dist::torch_state_dict(fsdp, shards, state, options);
  // Each leaf once (the head is wte's), its rows; Adam's options as torch names them.
  EXPECT(!sd.contains({"model", "head"}) && sd.contains({"model", "wte"}));
  EXPECT(sd.get({"model", "blocks", "1", "fc"}).is_same(shards.blocks[1].fc));
  EXPECT(sd.get({"optim", "state", "wte", "step"}).item<double>() == 3.0);
  EXPECT(sd.get_non_tensor({"optim", "param_groups", "0", "params"}).size() == 5 + 7 * 3);  // wte, wpe, lnf_w, lnf_b, temperature; 7 a block
  dist::save_dcp(g, sd, dir, {.shard_dim = fsdp.shard_dim()});
  std::cout << "fsdp torch save ok" << std::endl;
  return 0;
}

// Python's FSDP2 ranks resumed that checkpoint, took steps 3 and 4, and saved theirs
// (TDCPP_FSDP_PY/ckpt, on another number of ranks): read here, it is one process's five steps,
// and two more steps here are one process's seven.
static int scenario_fsdp_torch_load(const World& w) {
  using namespace fs_test;
  auto g = join(w, 60s);
  const std::filesystem::path dir = std::getenv("TDCPP_FSDP_PY");
  const Gpt init = torch_gpt();
  dist::FullyShard<Gpt> fsdp(g, init, {.units = {"blocks.*"}});
  auto [shards, state] = dist::load_torch_state_dict(fsdp, dir / "ckpt");
  EXPECT(state.step.item<int64_t>() == 5);
  EXPECT(shards.head.is_same(shards.wte));
  const Gpt five = one_process(init, 5);
  const double d5 = max_diff(fsdp.unshard(shards), five);
  const double dpy = max_diff(td::load_safetensors<Gpt>(dir / "final.safetensors", {.strict = false}), five);
  if (d5 > 1e-5 || dpy > 1e-5) {
    throw std::runtime_error("Python's checkpoint after 5 steps differs from one process by " + std::to_string(d5) +
                             " (its final weights: " + std::to_string(dpy) + ")");
  }
  sharded_steps(w, fsdp, shards, state, 5, 7);
  const double d7 = max_diff(fsdp.unshard(shards), one_process(init, 7));
  if (d7 > 1e-5) throw std::runtime_error("two more steps differ from one process by " + std::to_string(d7));
  // A checkpoint that is not of this model: the missing key is named.
  try {
    dist::FullyShard<Gpt> other(g, make_gpt(3), {.units = {"blocks.*"}});
    (void)dist::load_torch_state_dict(other, dir / "ckpt");
    EXPECT(false);
  } catch (const td::Error& e) {
    EXPECT(std::string(e.what()).find("temperature") != std::string::npos);
  }
  std::cout << "fsdp torch load ok" << std::endl;
  return 0;
}

// A TensorDict model (keys chosen at run time), each layer a unit: the views hold only the
// gathered unit's keys; 3 SGD steps equal one process's.
static int scenario_fsdp_dict(const World& w) {
  auto g = join(w, 60s);
  torch::manual_seed(3);
  const int64_t width = 10;
  td::TensorDict model;
  model.set("embed", at::randn({13, width}) * 0.3);
  for (int i = 0; i < 3; ++i) {
    model.set({"layers", std::to_string(i), "w"}, at::randn({width, width}) * 0.3);
    model.set({"layers", std::to_string(i), "b"}, at::randn({width}) * 0.1);
  }
  auto x = at::arange(18, at::kLong).remainder(13).reshape({6, 3});
  auto y = at::randn({6, 3, width});
  auto layer = [](const td::TensorDict& m, int i, const torch::Tensor& h) {
    return at::tanh(at::matmul(h, m.get({"layers", std::to_string(i), "w"})) + m.get({"layers", std::to_string(i), "b"}));
  };
  auto opt = td::optim::sgd({.lr = 0.1, .momentum = 0.9});
  td::TensorDict ref = model.clone();
  auto ref_state = opt.init(ref);
  dist::FullyShard<td::TensorDict> fsdp(g, model, {.units = {"layers.*"}});
  EXPECT(fsdp.units().size() == 4);
  td::TensorDict shards = fsdp.shard(model);
  EXPECT(shards.get("embed").size(0) == fsdp.rows("embed").rows);
  auto state = opt.init(shards);
  const int64_t per = 6 / w.size;
  for (int s = 0; s < 3; ++s) {
    auto xs = x.narrow(0, per * w.rank, per), ys = y.narrow(0, per * w.rank, per);
    auto grads = td::grad([&](const td::TensorDict& p) {
      return fsdp.forward(p, [&](const td::TensorDict& root) {
        EXPECT(!root.get({"layers", "0", "w"}).defined());  // the other units: undefined tensors
        auto h = root.get("embed").index_select(0, xs.reshape({-1})).view({per, 3, width});
        for (int i = 0; i < 3; ++i) h = fsdp.unit("layers." + std::to_string(i), [&](const td::TensorDict& m) { return layer(m, i, h); });
        return (h - ys).pow(2).mean();
      });
    })(shards);
    opt.step(shards, grads, state);
    auto ref_grads = td::grad([&](const td::TensorDict& p) {
      auto h = p.get("embed").index_select(0, x.reshape({-1})).view({6, 3, width});
      for (int i = 0; i < 3; ++i) h = layer(p, i, h);
      return (h - y).pow(2).mean();
    })(ref);
    opt.step(ref, ref_grads, ref_state);
  }
  const td::TensorDict whole = fsdp.unshard(shards);
  for (const auto& k : ref.keys({.include_nested = true, .leaves_only = true})) {
    const double d = (whole.get(k) - ref.get(k)).abs().max().item<double>();
    if (d > 1e-5) throw std::runtime_error("a TensorDict model's leaf differs from one process by " + std::to_string(d));
  }
  std::cout << "fsdp dict ok" << std::endl;
  return 0;
}
