#include "runtime_contract.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>

#include <algorithm>
#include <exception>
#include <iomanip>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "fhelium/residency/errors.hpp"
#include "fhelium/residency/value.hpp"

namespace fhelium::contract {

namespace {

using namespace residency;

// Thrown by `require` to end one check with its reason.
struct Violation : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct Skip : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void require(bool condition, const std::string& what) {
  if (!condition) throw Violation(what);
}

// Requires `call` to throw `Error`; anything else (or nothing) is a violation.
template <class Error, class F>
void require_throws(F&& call, const std::string& what) {
  try {
    call();
  } catch (const Error&) {
    return;
  } catch (const std::exception& other) {
    throw Violation(what + ": threw the wrong error: " + other.what());
  }
  throw Violation(what + ": nothing was thrown");
}

ResidentValue sample_value() {
  return ResidentValue("ContractBlob",
                       {{"weights", at::arange(64, at::TensorOptions().dtype(at::kFloat)).mul_(0.5)},
                        {"index", at::arange(16, at::TensorOptions().dtype(at::kLong))}},
                       {{"level", std::int64_t{3}}, {"scale", 1.25}, {"name", std::string("contract")}});
}

// Every location the subject can materialize at, bounded to keep the run short.
std::vector<ResidencyLocation> materializable(const DeviceRuntime& runtime) {
  std::vector<ResidencyLocation> result{PAGEABLE_HOST};
  if (runtime.can_pin()) result.push_back(PINNED_HOST);
  for (int index = 0; index < std::min(runtime.cuda_device_count(), 2); ++index) result.push_back(cuda_location(index));
  return result;
}

bool disjoint(const std::vector<StorageKey>& a, const std::vector<StorageKey>& b) {
  for (const auto& key : a) {
    if (std::find(b.begin(), b.end(), key) != b.end()) return false;
  }
  return true;
}

// Contents as seen from pageable host, through the subject's own copies.
bool same_contents(DeviceRuntime& runtime, const ResidentValue& value, const ResidentValue& expected) {
  const ResidentValue host = runtime.copy_to(value, PAGEABLE_HOST, std::nullopt);
  if (host.fields().size() != expected.fields().size()) return false;
  for (std::size_t i = 0; i < host.fields().size(); ++i) {
    if (host.fields()[i].first != expected.fields()[i].first) return false;
    if (!at::equal(host.fields()[i].second, expected.fields()[i].second)) return false;
  }
  return true;
}

class ContractRun {
 public:
  explicit ContractRun(const RuntimeSubject& subject) : subject_(subject), runtime_(*subject.runtime) {}

  std::vector<ContractCheck> run() {
    check("location validity", [&] { location_validity(); });
    check("copies land where asked", [&] { copies_land(); });
    check("copies are independent", [&] { copies_independent(); });
    check("copies keep contents and attributes", [&] { copies_keep_contents(); });
    check("pinned host without pinning", [&] { pinned_without_pinning(); });
    check("storage keys", [&] { storage_keys(); });
    check("locate edge cases", [&] { locate_edges(); });
    check("stream arguments", [&] { stream_arguments(); });
    check("events follow work", [&] { events_follow_work(); });
    check("event synchronization", [&] { event_synchronization(); });
    check("stream synchronization", [&] { stream_synchronization(); });
    check("allocator statistics", [&] { allocator_statistics(); });
    check("clock", [&] { clock(); });
    return std::move(checks_);
  }

 private:
  template <class F>
  void check(const std::string& name, F&& body) {
    ContractCheck result{subject_.name, name, ContractCheck::Verdict::pass, {}};
    try {
      body();
    } catch (const Skip& skip) {
      result.verdict = ContractCheck::Verdict::skip;
      result.detail = skip.what();
    } catch (const Violation& violation) {
      result.verdict = ContractCheck::Verdict::fail;
      result.detail = violation.what();
    } catch (const std::exception& error) {
      result.verdict = ContractCheck::Verdict::fail;
      result.detail = std::string("unexpected error: ") + error.what();
    }
    checks_.push_back(std::move(result));
  }

  int devices() const { return runtime_.cuda_device_count(); }
  void require_cuda() const {
    if (devices() == 0) throw Skip("runtime has no CUDA devices");
  }
  void require_work() const {
    require_cuda();
    if (!subject_.enqueue || !subject_.release) throw Skip("runtime cannot model consumer work");
  }

  void location_validity() {
    require(devices() >= 0, "negative CUDA device count");
    runtime_.check_location(PAGEABLE_HOST);
    runtime_.check_location(PINNED_HOST);  // always valid, even without pinning
    if (devices() > 0) runtime_.check_location(cuda_location(devices() - 1));
    require_throws<std::invalid_argument>([&] { runtime_.check_location(cuda_location(devices())); },
                                          "a CUDA device past the last is an argument error");
    require_throws<std::invalid_argument>(
        [&] { runtime_.copy_to(sample_value(), cuda_location(devices()), std::nullopt); },
        "copying to a missing CUDA device is an argument error");
  }

  void copies_land() {
    const ResidentValue value = sample_value();
    for (const auto& location : materializable(runtime_)) {
      const ResidentValue copy = runtime_.copy_to(value, location, std::nullopt);
      require(runtime_.locate(copy) == location, "a copy to " + location.name() + " is located elsewhere");
      require(runtime_.occupies(copy, location), "a copy to " + location.name() + " does not occupy it");
      for (const auto& other : materializable(runtime_)) {
        if (other != location) {
          require(!runtime_.occupies(copy, other), "a copy to " + location.name() + " also occupies " + other.name());
        }
      }
      // And back: a copy of the copy lands where asked too.
      const ResidentValue back = runtime_.copy_to(copy, PAGEABLE_HOST, std::nullopt);
      require(runtime_.locate(back) == PAGEABLE_HOST, "a copy from " + location.name() + " to host is elsewhere");
    }
    require(runtime_.locate(value) == PAGEABLE_HOST, "a fresh CPU value is not at pageable host");
  }

  void copies_independent() {
    const ResidentValue value = sample_value();
    const std::vector<StorageKey> original = runtime_.storage_keys(value);
    for (const auto& location : materializable(runtime_)) {
      const ResidentValue copy = runtime_.copy_to(value, location, std::nullopt);
      require(disjoint(runtime_.storage_keys(copy), original),
              "a copy to " + location.name() + " shares storage with its source");
      require(runtime_.storage_keys(copy).size() == original.size(),
              "a copy to " + location.name() + " changed the number of storages");
    }
    if (!subject_.copies_data) throw Skip("storages checked; copies move no data, so writes are not checked");
    const ResidentValue copy = runtime_.copy_to(value, PAGEABLE_HOST, std::nullopt);
    at::Tensor written = copy.field("weights");
    written.fill_(-7.0);
    require(!at::equal(value.field("weights"), written), "writing a copy changed its source");
  }

  void copies_keep_contents() {
    const ResidentValue value = sample_value();
    for (const auto& location : materializable(runtime_)) {
      const ResidentValue copy = runtime_.copy_to(value, location, std::nullopt);
      require(copy.type_name() == value.type_name(), "a copy to " + location.name() + " changed the type name");
      require(copy.attributes() == value.attributes(), "a copy to " + location.name() + " changed attributes");
      require(copy.logical_nbytes() == value.logical_nbytes(), "a copy to " + location.name() + " changed bytes");
      if (subject_.copies_data) {
        require(same_contents(runtime_, copy, value), "a copy to " + location.name() + " changed the contents");
      }
    }
    if (!subject_.copies_data) throw Skip("metadata checked; copies move no data");
  }

  void pinned_without_pinning() {
    if (runtime_.can_pin()) throw Skip("runtime can pin");
    require_throws<ResidencyUnavailableError>([&] { runtime_.copy_to(sample_value(), PINNED_HOST, std::nullopt); },
                                              "copying to pinned host without pinning");
  }

  void storage_keys() {
    const at::Tensor base = at::arange(32, at::TensorOptions().dtype(at::kFloat));
    const ResidentValue views("Views", {{"head", base.narrow(0, 0, 8)}, {"tail", base.narrow(0, 24, 8)}});
    require(runtime_.storage_keys(views).size() == 1, "two views of one storage are not one storage key");
    const ResidentValue value = sample_value();
    const auto keys = runtime_.storage_keys(value);
    require(keys.size() == 2, "two independent tensors are not two storage keys");
    require(keys[0] != keys[1], "two independent tensors share a storage key");
  }

  void locate_edges() {
    const ResidentValue empty("Empty", {});
    require(!runtime_.locate(empty).has_value(), "a value without tensors has a location");
    for (const auto& location : materializable(runtime_)) {
      require(runtime_.occupies(empty, location), "a value without tensors does not occupy " + location.name());
    }
    const auto locations = materializable(runtime_);
    if (locations.size() < 2) throw Skip("only pageable host: no mixed placement to build");
    const ResidentValue there = runtime_.copy_to(sample_value(), locations[1], std::nullopt);
    const ResidentValue mixed("Mixed", {{"host", sample_value().field("weights")}, {"away", there.field("index")}});
    require(!runtime_.locate(mixed).has_value(), "a value split over two locations has one location");
  }

  void stream_arguments() {
    const c10::Stream cpu_stream(c10::Stream::DEFAULT, c10::Device(c10::DeviceType::CPU));
    require_throws<std::invalid_argument>([&] { runtime_.record_event(cpu_stream); },
                                          "recording an event on a CPU stream");
    require_throws<std::invalid_argument>([&] { runtime_.synchronize_stream(cpu_stream); },
                                          "synchronizing a CPU stream");
    const c10::Stream far(c10::Stream::DEFAULT, c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(
                                                                                        devices())));
    require_throws<std::invalid_argument>([&] { runtime_.check_stream(cuda_location(devices()), far); },
                                          "a stream on a missing device");
    require_throws<std::invalid_argument>([&] { runtime_.copy_to(sample_value(), PAGEABLE_HOST, far); },
                                          "a host destination with a CUDA stream");
    require_cuda();
    const c10::Stream stream = subject_.stream(0, 1);
    runtime_.check_stream(cuda_location(0), stream);
    require_throws<std::invalid_argument>([&] { runtime_.check_stream(PINNED_HOST, stream); },
                                          "pinned host with a CUDA stream");
    require_throws<std::invalid_argument>([&] { runtime_.copy_to(sample_value(), PINNED_HOST, stream); },
                                          "copying to pinned host on a CUDA stream");
    const ResidentValue copy = runtime_.copy_to(sample_value(), cuda_location(0), stream);
    require(runtime_.locate(copy) == cuda_location(0), "a copy on a transfer stream landed elsewhere");
    if (devices() >= 2) {
      const c10::Stream other = subject_.stream(1, 1);
      require_throws<std::invalid_argument>([&] { runtime_.copy_to(sample_value(), cuda_location(0), other); },
                                            "a stream on the wrong device");
    }
  }

  void events_follow_work() {
    require_cuda();
    const c10::Stream stream = subject_.stream(0, 2);
    const auto idle = runtime_.record_event(stream);
    runtime_.synchronize_event(*idle);
    require(runtime_.query_event(*idle), "an event on an idle stream is not complete after synchronizing");
    if (subject_.events_complete_at_once) throw Skip("events complete at once: no ordering to check");
    require_work();
    subject_.enqueue(stream, 1000);
    const auto after_work = runtime_.record_event(stream);
    require(!runtime_.query_event(*after_work), "an event recorded after pending work completed before it");
    subject_.release(1000);
    require(runtime_.query_event(*after_work), "an event did not complete after its work finished");
  }

  void event_synchronization() {
    require_cuda();
    const c10::Stream stream = subject_.stream(0, 3);
    if (subject_.enqueue) subject_.enqueue(stream, 500);
    const auto event = runtime_.record_event(stream);
    runtime_.synchronize_event(*event);
    require(runtime_.query_event(*event), "synchronize_event returned before the event completed");
    runtime_.synchronize_event(*event);  // again: a completed event returns at once
  }

  void stream_synchronization() {
    require_cuda();
    const c10::Stream stream = subject_.stream(0, 4);
    if (subject_.enqueue) subject_.enqueue(stream, 700);
    const auto event = runtime_.record_event(stream);
    runtime_.synchronize_stream(stream);
    require(runtime_.query_event(*event), "synchronize_stream returned before the stream's work completed");
  }

  void allocator_statistics() {
    require_throws<std::invalid_argument>([&] { runtime_.allocator_stats(c10::Device(c10::DeviceType::CPU)); },
                                          "allocator statistics of a CPU device");
    require_cuda();
    const auto stats = runtime_.allocator_stats(cuda_location(0).device());
    require(stats.has_value() == subject_.allocator_stats_on_cuda,
            std::string("allocator statistics are ") + (stats ? "present" : "absent") + " on cuda:0, documented " +
                (subject_.allocator_stats_on_cuda ? "present" : "absent"));
    if (!stats) return;
    require(stats->allocated_bytes >= 0 && stats->reserved_bytes >= stats->allocated_bytes,
            "allocator statistics out of order: allocated " + std::to_string(stats->allocated_bytes) + ", reserved " +
                std::to_string(stats->reserved_bytes));
    const ResidentValue copy = runtime_.copy_to(sample_value(), cuda_location(0), std::nullopt);
    const auto with_copy = runtime_.allocator_stats(cuda_location(0).device());
    require(with_copy && with_copy->allocated_bytes >= stats->allocated_bytes + copy.logical_nbytes(),
            "a live copy on cuda:0 is not counted by its allocator statistics");
  }

  void clock() {
    std::int64_t last = runtime_.now_ns();
    require(last > 0, "the clock is not a positive Unix-like time: " + std::to_string(last));
    for (int i = 0; i < 100; ++i) {
      const std::int64_t now = runtime_.now_ns();
      require(now >= last, "the clock went backwards");
      last = now;
    }
  }

  const RuntimeSubject& subject_;
  DeviceRuntime& runtime_;
  std::vector<ContractCheck> checks_;
};

}  // namespace

std::vector<ContractCheck> run_contract(const RuntimeSubject& subject) { return ContractRun(subject).run(); }

std::size_t print_contract(std::ostream& out, const std::vector<ContractCheck>& checks) {
  std::size_t subject_width = 7, check_width = 5, failures = 0;
  for (const auto& check : checks) {
    subject_width = std::max(subject_width, check.subject.size());
    check_width = std::max(check_width, check.check.size());
  }
  out << std::left << std::setw(static_cast<int>(subject_width)) << "runtime" << "  "
      << std::setw(static_cast<int>(check_width)) << "check" << "  verdict\n";
  for (const auto& check : checks) {
    const char* verdict = check.verdict == ContractCheck::Verdict::pass   ? "PASS"
                          : check.verdict == ContractCheck::Verdict::skip ? "skip"
                                                                           : "FAIL";
    failures += check.verdict == ContractCheck::Verdict::fail;
    out << std::left << std::setw(static_cast<int>(subject_width)) << check.subject << "  "
        << std::setw(static_cast<int>(check_width)) << check.check << "  " << verdict;
    if (!check.detail.empty()) out << "  (" << check.detail << ")";
    out << '\n';
  }
  return failures;
}

}  // namespace fhelium::contract
