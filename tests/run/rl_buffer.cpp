// Storages, the writer, samplers and the replay buffer (rl/storage.hpp, rl/samplers.hpp,
// rl/replay_buffer.hpp) on their own: wrap-around, ndim-2 layouts, what each sampler draws, the
// statistics of prioritized sampling, threads, prefetching, and the errors for bad input and
// hostile files. Against TorchRL itself: tests/rl/buffer.py and tests/rl/buffer.cpp.
#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/rl.hpp>

namespace rl = tensordict::rl;
namespace fs = std::filesystem;
using tensordict::BatchSize;
using tensordict::Key;
using tensordict::TensorDict;

namespace {

// n transitions whose every leaf holds its id (from `first` on), so a row read back tells
// which write it came from and whether it is whole.
TensorDict transitions(int64_t first, int64_t n) {
  TensorDict td(BatchSize{n});
  const at::Tensor id = torch::arange(first, first + n, torch::kLong);
  td.set("obs", id.to(torch::kFloat).unsqueeze(1).expand({n, 3}).contiguous());
  td.set(Key({"next", "reward"}), id.to(torch::kDouble).unsqueeze(1));
  td.set(Key({"next", "done"}), torch::zeros({n, 1}, torch::kBool));
  td.set("step", id.clone());
  return td;
}

// Whether each sampled row is whole: all its leaves hold the same id.
bool whole(const TensorDict& s) {
  const at::Tensor id = s.get("step").to(torch::kDouble);
  return s.get("obs").to(torch::kDouble).eq(id.unsqueeze(1)).all().item<bool>() &&
         s.get(Key({"next", "reward"})).squeeze(1).eq(id).all().item<bool>();
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "td-rl-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

}  // namespace

TEST_CASE("rl: a storage allocates on the first write, wraps around and keeps the last rows of a batch larger than it") {
  rl::LazyTensorStorage s(5);
  CHECK_FALSE(s.initialized());
  rl::RoundRobinWriter w;
  CHECK((w.extend(s, transitions(0, 3)).equal(torch::tensor({0, 1, 2}))));
  CHECK(s.len() == 3);
  CHECK(s.capacity() == 5);
  CHECK((w.extend(s, transitions(3, 4)).equal(torch::tensor({3, 4, 0, 1}))));
  CHECK(s.len() == 5);
  CHECK(s.full());
  CHECK(w.cursor() == 2);
  CHECK(w.write_count() == 7);
  CHECK((s.data().get("step").equal(torch::tensor({5, 6, 2, 3, 4}))));
  CHECK(s.last_row() == 1);
  // 12 rows into 5: what a loop of writes would leave, the last five.
  w.extend(s, transitions(100, 12));
  CHECK((s.data().get("step").equal(torch::tensor({108, 109, 110, 111, 107}))));
  CHECK(w.cursor() == (2 + 12) % 5);
  // One item at the cursor.
  CHECK(w.add(s, tensordict::index(transitions(500, 1), 0)) == 4);
  CHECK(s.data().get("step")[4].item<int64_t>() == 500);
  // Other dtypes are converted, as copy_ does.
  TensorDict d = transitions(7, 2);
  d.set("step", d.get("step").to(torch::kInt));
  w.extend(s, d);
  CHECK((s.data().get("step").scalar_type() == torch::kLong));
}

TEST_CASE("rl: a storage refuses items whose keys, shapes or kinds differ, naming them, before writing anything") {
  rl::LazyTensorStorage s(8);
  rl::RoundRobinWriter w;
  w.extend(s, transitions(0, 2));
  const at::Tensor before = s.data().get("step").clone();
  TensorDict extra = transitions(2, 2);
  extra.set("other", torch::zeros({2}));
  CHECK_THROWS_WITH_AS(w.extend(s, extra), doctest::Contains("the data has key 'other', which the storage does not hold"), rl::BufferError);
  TensorDict missing = transitions(2, 2).exclude({"step"});
  CHECK_THROWS_WITH_AS(w.extend(s, missing), doctest::Contains("the data lacks key 'step'"), rl::BufferError);
  TensorDict shape = transitions(2, 2);
  shape.set("obs", torch::zeros({2, 4}));
  CHECK_THROWS_WITH_AS(w.extend(s, shape), doctest::Contains("key 'obs' has shape [2, 4], the storage expects [2, 3]"), rl::BufferError);
  TensorDict kind = transitions(2, 2);
  kind.set("note", tensordict::Entry(std::string("text")));
  CHECK_THROWS_WITH_AS(w.extend(s, kind), doctest::Contains("the data has key 'note'"), rl::BufferError);
  rl::LazyTensorStorage fresh(8);
  CHECK_THROWS_WITH_AS(w.extend(fresh, kind), doctest::Contains("'note' is a non-tensor entry"), rl::BufferError);
  CHECK_FALSE(fresh.initialized());
  CHECK(s.data().get("step").equal(before));
  CHECK(s.len() == 2);
  CHECK(w.cursor() == 2);
  CHECK_THROWS_AS((void)rl::LazyTensorStorage(0), rl::BufferError);
  rl::LazyTensorStorage empty(4);
  CHECK_THROWS_WITH_AS((void)empty.get(torch::tensor({0})), doctest::Contains("nothing was written"), rl::BufferError);
  CHECK_THROWS_WITH_AS((void)s.get(torch::tensor({8})), doctest::Contains("row index 8 is outside [0, 8)"), tensordict::IndexError);
}

TEST_CASE("rl: an ndim-2 buffer stores [envs, time] rollouts time-major, one lane per env, as TorchRL's") {
  auto storage = std::make_shared<rl::LazyTensorStorage>(12, rl::StorageOptions{.ndim = 2});
  rl::ReplayBuffer rb(storage, nullptr, {.batch_size = 5, .seed = 1});
  TensorDict roll(BatchSize{3, 4});  // 3 envs, 4 steps
  roll.set("obs", torch::arange(12).view({3, 4}));
  const at::Tensor idx = rb.extend(roll);
  CHECK((storage->shape() == std::vector<int64_t>{4, 3}));
  CHECK(storage->capacity() == 4);
  CHECK(rb.size() == 12);
  CHECK(idx.sizes() == at::IntArrayRef({12, 2}));
  // Row t holds step t of every env.
  CHECK(storage->data().get("obs").equal(torch::arange(12).view({3, 4}).t()));
  const TensorDict s = rb.sample();
  CHECK(s.get("index").sizes() == at::IntArrayRef({5, 2}));
  const at::Tensor i = s.get("index");
  CHECK(s.get("obs").equal(i.select(1, 1) * 4 + i.select(1, 0)));
  // Each stored row carries its row number, as TorchRL's writer stores it.
  CHECK(storage->data().get("index").equal(torch::arange(4).unsqueeze(1).expand({4, 3})));
}

TEST_CASE("rl: RandomSampler is reproducible from a seed and covers every element") {
  auto make = [](uint64_t seed) {
    auto rb = std::make_unique<rl::ReplayBuffer>(std::make_shared<rl::LazyTensorStorage>(50), nullptr,
                                                 rl::ReplayBufferOptions{.batch_size = 64, .seed = seed});
    rb->extend(transitions(0, 20));
    return rb;
  };
  auto a = make(3), b = make(3), c = make(4);
  const at::Tensor ia = a->sample().get("index"), ib = b->sample().get("index"), ic = c->sample().get("index");
  CHECK(ia.equal(ib));
  CHECK_FALSE(ia.equal(ic));
  std::set<int64_t> seen;
  for (int k = 0; k < 20; ++k) {
    const TensorDict s = a->sample();
    CHECK(whole(s));
    const at::Tensor i = s.get("index");
    CHECK(i.max().item<int64_t>() < 20);
    for (int64_t j = 0; j < i.numel(); ++j) seen.insert(i[j].item<int64_t>());
  }
  CHECK(seen.size() == 20);
}

TEST_CASE("rl: SamplerWithoutReplacement gives every element once per epoch, drop_last and shuffle as TorchRL's") {
  for (bool shuffle : {true, false}) {
    auto sampler = std::make_shared<rl::SamplerWithoutReplacement>(rl::WithoutReplacementOptions{.drop_last = false, .shuffle = shuffle});
    rl::ReplayBuffer rb(std::make_shared<rl::LazyTensorStorage>(30), sampler, {.batch_size = 4, .seed = 9});
    rb.extend(transitions(0, 10));
    std::vector<int64_t> order;
    for (int k = 0; k < 3; ++k) {
      const at::Tensor i = rb.sample().get("index");
      CHECK(i.numel() == (k < 2 ? 4 : 2));  // 10 = 4 + 4 + 2
      for (int64_t j = 0; j < i.numel(); ++j) order.push_back(i[j].item<int64_t>());
    }
    CHECK(sampler->ran_out());
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t j = 0; j < 10; ++j) CHECK(sorted[static_cast<std::size_t>(j)] == j);
    if (!shuffle) CHECK(order == sorted);
  }
  auto sampler = std::make_shared<rl::SamplerWithoutReplacement>(rl::WithoutReplacementOptions{.drop_last = true});
  rl::ReplayBuffer rb(std::make_shared<rl::LazyTensorStorage>(30), sampler, {.batch_size = 4});
  rb.extend(transitions(0, 10));
  CHECK(rb.sample().get("index").numel() == 4);
  CHECK(rb.sample().get("index").numel() == 4);
  CHECK(sampler->ran_out());  // the last 2 are dropped
  CHECK_THROWS_WITH_AS((void)rb.sample(11), doctest::Contains("greater than the storage's length"), rl::BufferError);
}

TEST_CASE("rl: SliceSampler draws consecutive steps of one trajectory, across the wrap-around") {
  // Trajectories of lengths 4, 3, 5 (episode ids 0, 1, 2), in a storage of 10 that wraps.
  auto storage = std::make_shared<rl::LazyTensorStorage>(10);
  rl::ReplayBuffer rb(storage, std::make_shared<rl::SliceSampler>(rl::SliceOptions{.slice_len = 3}), {.seed = 2});
  TensorDict td(BatchSize{12});
  td.set("episode", torch::tensor({0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2}));
  td.set("t", torch::tensor({0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4}));
  td.set(Key({"next", "done"}), torch::zeros({12, 1}, torch::kBool));
  rb.extend(td);
  // Rows now: 2 2 0 0 1 1 1 2 2 2 (the first two rows were overwritten by episode 2's last steps).
  for (int k = 0; k < 30; ++k) {
    const TensorDict s = rb.sample(9);
    const at::Tensor ep = s.get("episode").view({3, 3}), t = s.get("t").view({3, 3});
    CHECK(ep.eq(ep.select(1, 0).unsqueeze(1)).all().item<bool>());
    CHECK((t.select(1, 1) - t.select(1, 0)).eq(1).all().item<bool>());
    CHECK((t.select(1, 2) - t.select(1, 1)).eq(1).all().item<bool>());
    // The last step of each slice is marked truncated and done.
    const at::Tensor tr = s.get(Key({"next", "truncated"})).view({3, 3});
    CHECK(tr.select(1, 2).all().item<bool>());
    CHECK_FALSE(tr.narrow(1, 0, 2).any().item<bool>());
    CHECK(s.get(Key({"next", "done"})).view({3, 3}).select(1, 2).all().item<bool>());
  }
  // Episode 2 spans the wrap-around: rows 7, 8, 9, 0, 1.
  rl::SliceSampler probe(rl::SliceOptions{.slice_len = 3});
  const auto tr = probe.trajectories(*storage);
  bool spans = false;
  for (int64_t i = 0; i < tr.lengths.numel(); ++i) {
    if (tr.start[i][0].item<int64_t>() == 7) {
      CHECK(tr.lengths[i].item<int64_t>() == 5);
      CHECK(tr.stop[i][0].item<int64_t>() == 1);
      spans = true;
    }
  }
  CHECK(spans);
  // One slice of 5 fits only episode 2; no trajectory holds 6 steps, which strict_length refuses.
  rl::ReplayBuffer one(storage, std::make_shared<rl::SliceSampler>(rl::SliceOptions{.num_slices = 1}), {.seed = 3});
  for (int k = 0; k < 5; ++k) CHECK(one.sample(5).get("episode").eq(2).all().item<bool>());
  CHECK_THROWS_WITH_AS((void)one.sample(6), doctest::Contains("no trajectory is 6 steps long"), rl::BufferError);
  CHECK_THROWS_WITH_AS((void)rb.sample(7), doctest::Contains("not divisible by slice_len 3"), rl::BufferError);
}

TEST_CASE("rl: SliceSampler finds trajectories from end flags, and keeps short ones without strict_length") {
  auto storage = std::make_shared<rl::LazyTensorStorage>(20);
  rl::ReplayBuffer rb(storage, std::make_shared<rl::SliceSampler>(rl::SliceOptions{.num_slices = 2, .strict_length = false}), {.seed = 5});
  TensorDict td(BatchSize{7});
  td.set("t", torch::tensor({0, 1, 0, 1, 2, 3, 0}));
  td.set(Key({"next", "done"}), torch::tensor({false, true, false, false, false, true, false}).unsqueeze(1));
  rb.extend(td);
  for (int k = 0; k < 20; ++k) {
    const TensorDict s = rb.sample(8);  // 2 slices of up to 4
    const at::Tensor t = s.get("t");
    CHECK(t[0].item<int64_t>() >= 0);
    // Within a slice the steps count up by one.
    const at::Tensor tr = s.get(Key({"next", "truncated"})).squeeze(1);
    int64_t prev = -1;
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (prev >= 0) CHECK(t[i].item<int64_t>() == prev + 1);
      prev = tr[i].item<bool>() ? -1 : t[i].item<int64_t>();
    }
    CHECK(tr.sum().item<int64_t>() == 2);
  }
}

TEST_CASE("rl: PrioritizedSampler draws in proportion to priority^alpha, with TorchRL's importance weights") {
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    auto ps = std::make_shared<rl::PrioritizedSampler>(8, rl::PrioritizedOptions{.alpha = 0.5, .beta = 0.7, .eps = 0.0, .dtype = dtype});
    rl::ReplayBuffer rb(std::make_shared<rl::LazyTensorStorage>(8), ps, {.seed = 11});
    rb.extend(transitions(0, 4));
    CHECK(ps->default_priority() == 1.0);
    rb.update_priority(torch::arange(4), torch::tensor({1.0, 4.0, 9.0, 16.0}));
    // p^0.5 = 1, 2, 3, 4: element i is drawn with probability (i + 1) / 10.
    const int64_t n = 40000;
    const TensorDict s = rb.sample(n);
    CHECK(whole(s));
    const at::Tensor counts = torch::bincount(s.get("index"), {}, 4).to(torch::kDouble) / n;
    CHECK(torch::allclose(counts, torch::tensor({0.1, 0.2, 0.3, 0.4}, torch::kDouble), 0, 0.015));
    // Weights: (p_i / p_min)^-beta.
    const at::Tensor w = s.get("priority_weight");
    CHECK((w.scalar_type() == dtype));
    const at::Tensor expect = torch::pow(s.get("index").to(torch::kDouble) + 1, -0.7);
    CHECK(torch::allclose(w.to(torch::kDouble), expect, 1e-5, 1e-6));
    // New elements get the largest priority seen (16 -> 4 after alpha).
    rb.extend(transitions(4, 1));
    CHECK(ps->default_priority() == 16.0);
    CHECK(ps->tree_values(torch::tensor({4})).item<double>() == doctest::Approx(4.0));
    // update_tensordict_priority reduces each row's td_error by its maximum.
    TensorDict upd(BatchSize{2});
    upd.set("index", torch::tensor({0, 1}));
    upd.set("td_error", torch::tensor({{1.0, 25.0}, {0.0, 36.0}}));
    rb.update_tensordict_priority(upd);
    CHECK(torch::allclose(ps->tree_values(torch::tensor({0, 1})), torch::tensor({5.0, 6.0}, torch::kDouble)));
  }
  // A new item's td_error sets its priority on extend.
  auto ps = std::make_shared<rl::PrioritizedSampler>(4, rl::PrioritizedOptions{.alpha = 1.0, .eps = 0.0});
  rl::ReplayBuffer rb(std::make_shared<rl::LazyTensorStorage>(4), ps);
  TensorDict d = transitions(0, 2);
  d.set("td_error", torch::tensor({3.0, 7.0}));
  rb.extend(d);
  CHECK(torch::allclose(ps->tree_values(torch::tensor({0, 1})), torch::tensor({3.0, 7.0}, torch::kDouble)));
  CHECK_THROWS_WITH_AS(rb.update_priority(torch::tensor({0}), torch::tensor({-1.0})), doctest::Contains("negative or NaN"), rl::BufferError);
  CHECK_THROWS_WITH_AS(rb.update_priority(torch::tensor({0, 1}), torch::tensor({1.0, 2.0, 3.0})), doctest::Contains("3 priorities for 2 indices"),
                       rl::BufferError);
  CHECK_THROWS_AS(rl::PrioritizedSampler(4, {.alpha = -1}), rl::BufferError);
  // A sampler smaller than its storage is refused on the first write.
  rl::ReplayBuffer small(std::make_shared<rl::LazyTensorStorage>(10), std::make_shared<rl::PrioritizedSampler>(4));
  CHECK_THROWS_WITH_AS(small.extend(transitions(0, 2)), doctest::Contains("capacity 4 is below the storage's 10"), rl::BufferError);
}

TEST_CASE("rl: the replay buffer refuses to sample when empty, and names a missing batch size") {
  rl::ReplayBuffer rb(std::make_shared<rl::LazyTensorStorage>(4));
  CHECK_THROWS_WITH_AS((void)rb.sample(2), doctest::Contains("cannot sample from an empty storage"), rl::BufferError);
  rb.extend(transitions(0, 2));
  CHECK_THROWS_WITH_AS((void)rb.sample(), doctest::Contains("no batch size"), rl::BufferError);
  for (auto s : std::vector<std::shared_ptr<rl::Sampler>>{std::make_shared<rl::SamplerWithoutReplacement>(),
                                                          std::make_shared<rl::SliceSampler>(rl::SliceOptions{.slice_len = 1}),
                                                          std::make_shared<rl::PrioritizedSampler>(4)}) {
    rl::ReplayBuffer e(std::make_shared<rl::LazyTensorStorage>(4), s);
    CHECK_THROWS_WITH_AS((void)e.sample(1), doctest::Contains("empty storage"), rl::BufferError);
  }
  rb.clear();
  CHECK(rb.empty());
  CHECK_THROWS_AS((void)rb.sample(1), rl::BufferError);
}

TEST_CASE("rl: several writer threads and samplers at once lose no item and tear none") {
  const int threads = 4, per_thread = 300, batch = 3;
  auto storage = std::make_shared<rl::LazyTensorStorage>(threads * per_thread * batch);
  rl::ReplayBuffer rb(storage, nullptr, {.seed = 0});
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, samples{0};
  std::thread reader([&] {
    while (!done) {
      if (rb.size() == 0) continue;
      if (!whole(rb.sample(16))) ++torn;
      ++samples;
    }
  });
  std::vector<std::thread> ws;
  for (int t = 0; t < threads; ++t) {
    ws.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) rb.extend(transitions((t * per_thread + i) * batch, batch));
    });
  }
  for (auto& w : ws) w.join();
  done = true;
  reader.join();
  CHECK(torn == 0);
  CHECK(rb.size() == threads * per_thread * batch);
  CHECK(rb.writer().write_count() == threads * per_thread * batch);
  // Every id written once, each row whole.
  const at::Tensor ids = std::get<0>(storage->data().get("step").sort());
  CHECK(ids.equal(torch::arange(threads * per_thread * batch)));
  CHECK(whole(storage->data()));
}

TEST_CASE("rl: prefetching draws batches ahead on background threads; a transform runs on each sample") {
  rl::ReplayBuffer rb(std::make_shared<rl::LazyTensorStorage>(100), nullptr,
                      {.batch_size = 8, .seed = 4, .prefetch = 3, .transform = [](TensorDict td) {
                         td.set("twice", td.get("obs") * 2);
                         return td;
                       }});
  rb.extend(transitions(0, 50));
  for (int k = 0; k < 20; ++k) {
    const TensorDict s = rb.sample();
    CHECK(s.batch_size() == BatchSize{8});
    CHECK(whole(s));
    CHECK(s.get("twice").equal(s.get("obs") * 2));
  }
  CHECK(rb.sample(5).batch_size() == BatchSize{5});  // another size: the prefetched ones are dropped
  rl::ReplayBuffer empty(std::make_shared<rl::LazyTensorStorage>(4), nullptr, {.batch_size = 2, .prefetch = 2});
  CHECK_THROWS_AS((void)empty.sample(), rl::BufferError);
}

TEST_CASE("rl: dumps and loads keep items, cursor, count and priorities; a memmap storage dumps in place") {
  TempDir tmp;
  const fs::path scratch = tmp.path / "scratch";
  auto ps = std::make_shared<rl::PrioritizedSampler>(6, rl::PrioritizedOptions{.alpha = 0.8, .beta = 0.3});
  rl::ReplayBuffer rb(std::make_shared<rl::LazyMemmapStorage>(6, rl::MemmapStorageOptions{.scratch_dir = scratch}), ps, {.batch_size = 2});
  rb.extend(transitions(0, 4));
  rb.extend(transitions(4, 3));
  rb.update_priority(torch::tensor({0, 2}), torch::tensor({5.0, 0.5}));
  CHECK(fs::exists(scratch / "obs.memmap"));
  rb.dumps(tmp.path / "dump");
  for (const char* f : {"buffer_metadata.json", "storage/meta.json", "storage/storage_metadata.json", "sampler/sumtree.memmap",
                        "sampler/sampler_metadata.json", "writer/metadata.json"}) {
    CHECK(fs::exists(tmp.path / "dump" / f));
  }
  auto ps2 = std::make_shared<rl::PrioritizedSampler>(6, rl::PrioritizedOptions{.alpha = 0.8, .beta = 0.3});
  rl::ReplayBuffer back(std::make_shared<rl::LazyTensorStorage>(6), ps2);
  back.loads(tmp.path / "dump");
  CHECK(back.size() == 6);
  CHECK(back.writer().cursor() == 1);
  CHECK(back.writer().write_count() == 7);
  CHECK(back.batch_size() == std::optional<int64_t>(2));
  CHECK(back.storage().data().get("step").equal(rb.storage().data().get("step")));
  CHECK(ps2->tree_values(torch::arange(6)).equal(ps->tree_values(torch::arange(6))));
  CHECK(ps2->default_priority() == ps->default_priority());
  // A memmap storage dumped into its own scratch dir writes only the length file.
  rb.storage().dumps(scratch);
  CHECK(fs::exists(scratch / "storage_metadata.json"));
  rl::LazyMemmapStorage mapped(6, {.scratch_dir = scratch, .existsok = true});
  mapped.loads(scratch);
  CHECK(tensordict::is_memmap(mapped.data()));
  CHECK(mapped.data().get("step").equal(rb.storage().data().get("step")));
  // A scratch dir that holds a save already is refused without existsok.
  rl::LazyMemmapStorage clash(6, {.scratch_dir = scratch});
  rl::RoundRobinWriter w;
  CHECK_THROWS_WITH_AS(w.extend(clash, transitions(0, 1)), doctest::Contains("holds a save already"), rl::BufferError);
}

TEST_CASE("rl: loads refuses corrupted and newer files, naming them, and leaves the buffer as it was") {
  TempDir tmp;
  rl::ReplayBuffer src(std::make_shared<rl::LazyTensorStorage>(6), std::make_shared<rl::PrioritizedSampler>(6), {.batch_size = 2});
  src.extend(transitions(0, 5));
  src.update_priority(torch::tensor({1}), torch::tensor({9.0}));
  const fs::path good = tmp.path / "good";
  src.dumps(good);
  auto ts = std::make_shared<rl::PrioritizedSampler>(6);
  auto target = std::make_unique<rl::ReplayBuffer>(std::make_shared<rl::LazyTensorStorage>(6), ts, rl::ReplayBufferOptions{.batch_size = 3});
  target->extend(transitions(100, 2));
  const at::Tensor prio_before = ts->tree_values(torch::arange(6));
  auto unchanged = [&] {
    CHECK(target->size() == 2);
    CHECK(target->writer().cursor() == 2);
    CHECK(target->storage().data().get("step").narrow(0, 0, 2).equal(torch::tensor({100, 101})));
    CHECK(ts->tree_values(torch::arange(6)).equal(prio_before));
  };
  int k = 0;
  auto broken = [&](const std::string& file, const std::string& text) {
    const fs::path d = tmp.path / ("bad" + std::to_string(k++));
    fs::copy(good, d, fs::copy_options::recursive);
    write_text(d / file, text);
    return d;
  };
  struct Case {
    const char* file;
    std::string text;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"storage/storage_metadata.json", "{not json", "storage_metadata.json: not valid JSON"},
      {"storage/storage_metadata.json", R"({"metadata": {}, "is_pytree": false})", "storage_metadata.json: no 'len' entry"},
      {"storage/storage_metadata.json", R"({"metadata": {}, "is_pytree": false, "len": 99})", "length 99 beyond the saved storage's 6"},
      {"storage/storage_metadata.json", R"({"metadata": {}, "is_pytree": false, "len": -1})", "'len' is -1"},
      {"storage/storage_metadata.json", R"({"metadata": {}, "is_pytree": true, "len": 2})", "a PyTree storage"},
      {"storage/storage_metadata.json", R"({"metadata": {}, "is_pytree": false, "len": 2, "_schema_version": 3})", "written by a newer TorchRL"},
      {"sampler/sampler_metadata.json",
       R"({"_alpha": 0.6, "_beta": 0.4, "_eps": 1e-8, "_max_priority": [null, null], "_max_capacity": 6.0, "_schema_version": 2})",
       "written by a newer TorchRL"},
      {"sampler/sampler_metadata.json",
       R"({"_alpha": 0.6, "_beta": 0.4, "_eps": 1e-8, "_max_priority": [null, null], "_max_capacity": 7.0, "_schema_version": 1})",
       "a sampler of capacity 7"},
      {"sampler/sumtree.memmap", "short", "sumtree.memmap: 5 bytes, 48 expected"},
      {"writer/metadata.json", R"({"cursor": 17, "write_count": 5})", "cursor 17 beyond the storage's 6 rows"},
      {"writer/metadata.json", R"({"write_count": 5})", "metadata.json: no 'cursor' entry"},
      {"buffer_metadata.json", R"({"batch_size": 2, "consume_after_n_samples": 3})", "a consuming buffer"},
      {"storage/meta.json", R"({"shape": [6], "obs": {"type": "../../etc"}})", "meta.json"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.file);
    CAPTURE(c.text);
    const fs::path d = broken(c.file, c.text);
    CHECK_THROWS_WITH_AS(target->loads(d), doctest::Contains(c.message), tensordict::Error);
    unchanged();
  }
  // A missing file is named too.
  const fs::path d = tmp.path / "nowriter";
  fs::copy(good, d, fs::copy_options::recursive);
  fs::remove_all(d / "writer");
  CHECK_THROWS_WITH_AS(target->loads(d), doctest::Contains("writer/metadata.json: missing"), tensordict::FormatError);
  unchanged();
  // A storage of other keys: refused before anything changes.
  rl::ReplayBuffer other(std::make_shared<rl::LazyTensorStorage>(6), std::make_shared<rl::PrioritizedSampler>(6));
  TensorDict o(BatchSize{2});
  o.set("x", torch::zeros({2}));
  other.extend(o);
  other.dumps(tmp.path / "other");
  CHECK_THROWS_WITH_AS(target->loads(tmp.path / "other"), doctest::Contains("key 'x'"), rl::BufferError);
  unchanged();
  // The good one loads.
  target->loads(good);
  CHECK(target->size() == 5);
}

TEST_CASE("rl: a published memmap storage shows another reader the rows written so far, each whole") {
  TempDir tmp;
  rl::LazyMemmapStorage s(40, {.scratch_dir = tmp.path / "live", .publish = true});
  rl::RoundRobinWriter w;
  for (int k = 0; k < 5; ++k) {
    w.extend(s, transitions(k * 3, 3));
    // What a reader in another process opens: the length file and the mapped leaves.
    const auto meta = tensordict::detail::read_json_file(tmp.path / "live" / "storage_metadata.json");
    const int64_t len = meta.at("len").get<int64_t>();
    CHECK(len == (k + 1) * 3);
    const TensorDict seen = tensordict::load_memmap(tmp.path / "live");
    const TensorDict rows = tensordict::index(seen, {at::indexing::Slice(0, len)});
    CHECK(whole(rows));
    CHECK(rows.get("step").equal(torch::arange(len)));
  }
}

TEST_CASE("rl: every sampler draws the same batches from the same seed") {
  auto draws = [](std::function<std::shared_ptr<rl::Sampler>()> make, uint64_t seed) {
    rl::ReplayBuffer rb(std::make_shared<rl::LazyTensorStorage>(64), make(), {.seed = seed});
    TensorDict td = transitions(0, 40);
    td.set(Key({"next", "done"}), (torch::arange(40) % 7 == 6).unsqueeze(1));
    rb.extend(td);
    std::vector<at::Tensor> out;
    for (int k = 0; k < 4; ++k) out.push_back(rb.sample(12).get("index"));
    return at::cat(out);
  };
  const std::vector<std::function<std::shared_ptr<rl::Sampler>()>> makers{
      [] { return std::make_shared<rl::RandomSampler>(); },
      [] { return std::make_shared<rl::SamplerWithoutReplacement>(); },
      [] { return std::make_shared<rl::SliceSampler>(rl::SliceOptions{.slice_len = 3}); },
      [] { return std::make_shared<rl::PrioritizedSampler>(64); }};
  for (const auto& make : makers) {
    const at::Tensor a = draws(make, 21), b = draws(make, 21), c = draws(make, 22);
    CHECK(a.equal(b));
    CHECK_FALSE(a.equal(c));
  }
}
