// Locations, values, specs and actions: parsing, naming, byte counts, validation.
#include <ATen/ops/arange.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <functional>
#include <unordered_set>

#include "support.hpp"

namespace fhelium::residency {
namespace {

using testing::make_value;
using testing::make_view_value;

TEST(Location, CanonicalNamesAndDevices) {
  EXPECT_EQ(PAGEABLE_HOST.name(), "pageable-host");
  EXPECT_EQ(PINNED_HOST.name(), "pinned-host");
  EXPECT_EQ(cuda_location(7).name(), "cuda:7");
  EXPECT_EQ(PAGEABLE_HOST.device(), c10::Device(c10::DeviceType::CPU));
  EXPECT_EQ(PINNED_HOST.device(), c10::Device(c10::DeviceType::CPU));
  EXPECT_EQ(cuda_location(3).device(), c10::Device(c10::DeviceType::CUDA, 3));
  EXPECT_EQ(cuda_location(3).cuda_index(), 3);
  EXPECT_EQ(PINNED_HOST.cuda_index(), -1);
  EXPECT_NE(PAGEABLE_HOST, PINNED_HOST);
}

TEST(Location, ParseRoundTripsEveryCanonicalName) {
  for (int index = 0; index <= max_cuda_device_index; ++index) {
    EXPECT_EQ(ResidencyLocation::parse("cuda:" + std::to_string(index)), cuda_location(index));
  }
  EXPECT_EQ(ResidencyLocation::parse("pageable-host"), PAGEABLE_HOST);
  EXPECT_EQ(ResidencyLocation::parse("pinned-host"), PINNED_HOST);
}

TEST(Location, ParseRejectsMalformedNames) {
  for (const char* text : {"cuda", "cuda:", "cuda:-1", "cuda:128", "cuda:01", "cuda:1x", "cpu", "", "CUDA:0",
                           "pinned_host", "cuda:0 ", "cuda:99999999999"}) {
    EXPECT_THROW(ResidencyLocation::parse(text), std::invalid_argument) << text;
  }
  try {
    ResidencyLocation::parse("gpu:0");
    FAIL();
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("gpu:0"), std::string::npos);
  }
  EXPECT_THROW(cuda_location(-1), std::invalid_argument);
  EXPECT_THROW(cuda_location(128), std::invalid_argument);
  EXPECT_THROW(ResidencyLocation(ResidencyLocationKind::pinned_host, 2), std::invalid_argument);
}

TEST(Location, OrderIsPageablePinnedThenCudaByIndex) {
  EXPECT_LT(PAGEABLE_HOST, PINNED_HOST);
  EXPECT_LT(PINNED_HOST, cuda_location(0));
  EXPECT_LT(cuda_location(0), cuda_location(1));
  EXPECT_LT(cuda_location(9), cuda_location(10));
  std::unordered_set<ResidencyLocation> set{PAGEABLE_HOST, PINNED_HOST, cuda_location(0), cuda_location(0)};
  EXPECT_EQ(set.size(), 3u);
}

TEST(ResidentValue, CountsLogicalAndUniqueStorageBytes) {
  const ResidentValue value = make_value(256);
  EXPECT_EQ(value.logical_nbytes(), 1024);
  EXPECT_EQ(value.storage_nbytes(), 1024);
  EXPECT_EQ(value.type_name(), "Blob");
  ASSERT_EQ(value.attributes().size(), 2u);
  EXPECT_EQ(std::get<std::int64_t>(value.attributes()[0].second), 3);

  // Two 16-element views of one 64-element storage: the storage counts once.
  const ResidentValue views = make_view_value(64, 16);
  EXPECT_EQ(views.logical_nbytes(), 2 * 16 * 4);
  EXPECT_EQ(views.storage_nbytes(), 64 * 4);
  EXPECT_EQ(views.storage_keys().size(), 1u);

  // Past the short-list limit too: 40 fields viewing two storages, in turn.
  const at::Tensor first = at::zeros({80});
  const at::Tensor second = at::zeros({40});
  std::vector<ResidentValue::Field> many;
  for (int index = 0; index < 40; ++index) {
    const at::Tensor& base = index % 2 == 0 ? first : second;
    many.emplace_back("v" + std::to_string(index), base.narrow(0, index / 2, 1));
  }
  const ResidentValue shared("Blob", std::move(many));
  EXPECT_EQ(shared.logical_nbytes(), 40 * 4);
  EXPECT_EQ(shared.storage_nbytes(), (80 + 40) * 4);
  ASSERT_EQ(shared.storage_keys().size(), 2u);
  EXPECT_EQ(shared.storage_keys()[0].address,
            reinterpret_cast<std::uintptr_t>(first.storage().unsafeGetStorageImpl()));
}

// A value of one tensor keeps its field and storage key inside itself; more
// spill to the heap in field order, and a move carries either form whole.
TEST(ResidentValue, KeepsOneFieldAndStorageInlineAndSpillsMoreInOrder) {
  const ResidentValue one = make_value(8);
  ASSERT_EQ(one.fields().size(), 1u);
  EXPECT_FALSE(one.fields().spilled());
  ASSERT_EQ(one.storage_keys().size(), 1u);
  EXPECT_FALSE(one.storage_keys().spilled());

  const at::Tensor a = at::zeros({2}), b = at::zeros({3}), c = at::zeros({5});
  ResidentValue three("Triple", {{"a", a}, {"b", b}, {"c", c}});
  EXPECT_TRUE(three.fields().spilled());
  EXPECT_TRUE(three.storage_keys().spilled());
  const ResidentValue moved = std::move(three);
  ASSERT_EQ(moved.fields().size(), 3u);
  ASSERT_EQ(moved.storage_keys().size(), 3u);
  const at::Tensor* expected[] = {&a, &b, &c};
  for (std::size_t index = 0; index < 3; ++index) {
    EXPECT_EQ(moved.fields()[index].first, std::string(1, static_cast<char>('a' + index)));
    EXPECT_TRUE(moved.fields()[index].second.is_same(*expected[index]));
    EXPECT_EQ(moved.storage_keys()[index].address,
              reinterpret_cast<std::uintptr_t>(expected[index]->storage().unsafeGetStorageImpl()));
  }
  EXPECT_EQ(moved.storage_nbytes(), (2 + 3 + 5) * 4);

  ResidentValue inline_source = make_value(8);
  const at::Tensor held = inline_source.fields().front().second;
  const ResidentValue inline_moved = std::move(inline_source);
  ASSERT_EQ(inline_moved.fields().size(), 1u);
  EXPECT_TRUE(inline_moved.fields().front().second.is_same(held));
  EXPECT_EQ(inline_moved.storage_nbytes(), 32);
}

TEST(ResidentValue, RejectsMalformedBundles) {
  const at::Tensor tensor = at::zeros({4});
  EXPECT_THROW(ResidentValue("", {{"a", tensor}}), std::invalid_argument);
  EXPECT_THROW(ResidentValue("T", {{"", tensor}}), std::invalid_argument);
  EXPECT_THROW(ResidentValue("T", {{"a", tensor}, {"a", tensor}}), std::invalid_argument);
  EXPECT_THROW(ResidentValue("T", {{"a", at::Tensor()}}), std::invalid_argument);
  EXPECT_THROW(ResidentValue("T", {{"a", tensor}}, {{"k", std::int64_t{1}}, {"k", 2.0}}), std::invalid_argument);
  EXPECT_THROW(make_value(4).field("missing"), std::out_of_range);
  EXPECT_THROW(make_value(4).with_tensors({}), std::invalid_argument);
}

// Duplicates are found whether a value has a few names or many, and the
// first problem in field order is the one reported.
TEST(ResidentValue, NamesTheFirstDuplicateAmongFewOrManyNames) {
  const auto message_of = [](const std::function<void()>& build) -> std::string {
    try {
      build();
    } catch (const std::invalid_argument& error) {
      return error.what();
    }
    return "no error";
  };
  for (const int count : {3, 40}) {
    std::vector<ResidentValue::Field> fields;
    std::vector<ResidentValue::Attribute> attributes;
    for (int index = 0; index < count; ++index) {
      fields.emplace_back("f" + std::to_string(index), at::zeros({1}));
      attributes.emplace_back("a" + std::to_string(index), std::int64_t{index});
    }
    EXPECT_EQ(ResidentValue("T", fields, attributes).fields().size(), static_cast<std::size_t>(count));
    auto repeated_fields = fields;
    repeated_fields.back().first = "f1";
    EXPECT_EQ(message_of([&] { ResidentValue("T", repeated_fields, attributes); }),
              "ResidentValue has duplicate field 'f1'")
        << count;
    auto repeated_attributes = attributes;
    repeated_attributes.back().first = "a0";
    EXPECT_EQ(message_of([&] { ResidentValue("T", fields, repeated_attributes); }),
              "ResidentValue has duplicate attribute 'a0'")
        << count;
    // An empty name before the repeat is the first problem.
    auto empty_then_repeated = fields;
    empty_then_repeated[1].first.clear();
    empty_then_repeated.back().first = "f0";
    EXPECT_EQ(message_of([&] { ResidentValue("T", empty_then_repeated, attributes); }),
              "ResidentValue field name must be non-empty")
        << count;
  }
  EXPECT_EQ(message_of([] { ResidentValue("T", {{"a", at::Tensor()}, {"a", at::zeros({1})}}); }),
            "ResidentValue field 'a' holds no tensor");
}

TEST(ValueSpec, ValidatesBytesAndType) {
  const ResidencyValueSpec spec("Blob", 10, 12, ReplicaMode::replicable, Recoverability::reconstructible);
  EXPECT_EQ(spec.storage_nbytes, 12);
  EXPECT_THROW(ResidencyValueSpec("", 1, 1, ReplicaMode::exclusive, Recoverability::must_preserve),
               std::invalid_argument);
  EXPECT_THROW(ResidencyValueSpec("B", -1, 1, ReplicaMode::exclusive, Recoverability::must_preserve),
               std::invalid_argument);
  EXPECT_THROW(ResidencyValueSpec("B", 0, -1, ReplicaMode::exclusive, Recoverability::must_preserve),
               std::invalid_argument);
  EXPECT_THROW(ResidencyValueSpec("B", 8, 4, ReplicaMode::exclusive, Recoverability::must_preserve),
               std::invalid_argument);
  EXPECT_EQ(to_string(Recoverability::must_preserve), "must-preserve");
  EXPECT_EQ(to_string(ReplicaMode::replicable), "replicable");
}

// validate() decides most specs with one quick test and leaves the rest to
// the checks in order: a spec the quick test does not pass may still be
// valid, and one with several faults is refused for its first.
TEST(ValueSpec, AcceptsTypesStartingWithBlanksAndNamesTheFirstOfSeveralFaults) {
  ResidencyValueSpec spec("Blob", 4, 4, ReplicaMode::exclusive, Recoverability::must_preserve);
  for (const std::string type : {"\tBlob", " B", "\x7f", "\xC3\xA9", "\x1c\x1dx"}) {
    SCOPED_TRACE(::testing::PrintToString(type));
    spec.value_type = type;
    EXPECT_NO_THROW(spec.validate());
  }
  const auto first_fault = [](const ResidencyValueSpec& faulty) -> std::string {
    try {
      faulty.validate();
    } catch (const std::invalid_argument& error) {
      return error.what();
    }
    return "accepted";
  };
  const auto faulty = [&](std::string type, std::int64_t logical, std::int64_t storage, int mode, int recoverability) {
    ResidencyValueSpec changed = spec;
    changed.value_type = std::move(type);
    changed.logical_nbytes = logical;
    changed.storage_nbytes = storage;
    changed.replica_mode = static_cast<ReplicaMode>(mode);
    changed.recoverability = static_cast<Recoverability>(recoverability);
    return first_fault(changed);
  };
  EXPECT_EQ(faulty(" \t", -1, -2, 9, 9), "ResidencyValueSpec value_type must be non-empty");
  EXPECT_EQ(faulty("\x1f ", 4, 8, 0, 0), "ResidencyValueSpec value_type must be non-empty");
  EXPECT_EQ(faulty("B", -1, -2, 9, 9), "ResidencyValueSpec logical_nbytes must be non-negative");
  EXPECT_EQ(faulty("B", 1, -2, 9, 9), "ResidencyValueSpec storage_nbytes must be non-negative");
  EXPECT_EQ(faulty("B", 8, 4, 9, 9),
            "ResidencyValueSpec storage_nbytes (4) must be greater than or equal to logical_nbytes (8)");
  EXPECT_EQ(faulty("B", 4, 8, 9, 9),
            "ResidencyValueSpec replica_mode must be a ReplicaMode (replicable or exclusive), got 9");
  EXPECT_EQ(faulty("B", 4, 8, 0, -1), "ResidencyValueSpec recoverability must be a Recoverability "
                                      "(reconstructible or must-preserve), got -1");
  EXPECT_EQ(faulty(" B", 0, 0, 1, 0), "accepted");
}

TEST(Plan, ReservationsValidateAndActionsDescribeThemselves) {
  EXPECT_THROW(MemoryReservation(PAGEABLE_HOST, -1, "x"), std::invalid_argument);
  EXPECT_THROW(MemoryReservation(PAGEABLE_HOST, 1, "  "), std::invalid_argument);
  const ResidencyHandle handle{"m", "7", "Blob"};
  const ResidencyAction move = MoveResident{handle, cuda_location(1), PINNED_HOST};
  EXPECT_EQ(describe(move), "move 7 pinned-host -> cuda:1");
  EXPECT_STREQ(action_kind(move), "move");
  EXPECT_EQ(action_handle(move), handle);
  EXPECT_EQ(describe(ResidencyAction{DiscardValue{handle}}), "discard 7");
}

}  // namespace
}  // namespace fhelium::residency
