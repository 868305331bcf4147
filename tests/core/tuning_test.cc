// The tuning table: file round trip, nearest-bucket lookup, and `auto` following it per batch.
#include <gtest/gtest.h>

#include <cstdio>

#include "attnkit/registry.h"
#include "attnkit/tuning.h"

namespace attnkit {
namespace {

TuningEntry entry(const std::string& phase, int batch, int64_t kv, const std::string& backend) {
  TuningEntry e;
  e.bucket = {.device = "cpu", .phase = phase, .heads = "16q8kv128", .batch_size = batch, .kv_len = kv};
  e.backend = backend;
  e.median_ms = {{backend, 1.0}, {"other", 2.0}};
  return e;
}

TEST(TuningTable, SavesAndLoads) {
  TuningTable t;
  t.add(entry("decode", 8, 4096, "reference"));
  t.add(entry("prefill", 1, 512, "reference"));
  t.add(entry("decode", 8, 4096, "cpu"));  // same bucket: replaces
  const std::string path = ::testing::TempDir() + "/tune.json";
  t.save(path);
  const TuningTable u = TuningTable::load(path);
  ASSERT_EQ(u.entries().size(), 2u);
  EXPECT_EQ(u.entries()[0].backend, "cpu");
  EXPECT_EQ(u.entries()[1].median_ms.at("other"), 2.0);
  std::remove(path.c_str());
}

TEST(TuningTable, LooksUpTheNearestBucket) {
  TuningTable t;
  t.add(entry("decode", 1, 256, "a"));
  t.add(entry("decode", 64, 16384, "b"));
  TuningBucket want{.device = "cpu", .phase = "decode", .heads = "16q8kv128", .batch_size = 32, .kv_len = 8192};
  ASSERT_NE(t.lookup(want), nullptr);
  EXPECT_EQ(t.lookup(want)->backend, "b");
  want.heads = "32q8kv128";
  EXPECT_EQ(t.lookup(want), nullptr);
}

TEST(TuningTable, BadFileNamesTheProblem) {
  const std::string path = ::testing::TempDir() + "/bad.json";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("{\"format\": \"other\"}", f);
  std::fclose(f);
  try {
    TuningTable::load(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "tuning table '" + path + "': format must be attnkit-tuning-1, got 'other'");
  }
  std::remove(path.c_str());
}

TEST(Auto, FollowsTheTablePerBatch) {
  const ModelSpec model = make_preset("qwen3-0.6b", 1);
  KvCacheConfig c;
  c.num_pages = 64;
  c.num_kv_heads = 8;
  c.head_dim_k = c.head_dim_v = 128;
  KvCache cache(c);
  auto table = std::make_shared<TuningTable>();
  table->add(entry("decode", 1, 64, "reference"));
  set_tuning_table(table, "test table");
  auto backend = create_backend("auto", {&model, &cache});
  ForwardBatch decode = build_batch(cache, {{.id = -1, .prefix_len = 40, .num_new_tokens = 1, .custom_mask = {}}});
  backend->init_forward_metadata(decode);
  EXPECT_EQ(backend->name(), "auto:reference");
  // A prefill bucket the table does not hold falls back to the written rules.
  ForwardBatch prefill = build_batch(cache, {{.id = -1, .prefix_len = 0, .num_new_tokens = 30, .custom_mask = {}}});
  backend->init_forward_metadata(prefill);
  const std::string expected = "auto:" + select_backend(model.layer(0), c).backend;
  EXPECT_EQ(backend->name(), expected);
  set_tuning_table(nullptr);
}

}  // namespace
}  // namespace attnkit
