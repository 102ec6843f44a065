// Loading scenario YAML files into the typed Scenario model.
//
// Every problem in a file -- malformed YAML, an unknown key, a wrong type, a
// malformed size or location, a reference to an undeclared value, plan or
// lifetime -- raises ScenarioError naming the file, line and column. Loading
// never half-succeeds. Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "fhelium/harness/scenario.hpp"

namespace fhelium::harness {

class ScenarioError : public std::runtime_error {
 public:
  ScenarioError(std::string file, int line, int column, const std::string& message);
  const std::string& file() const noexcept { return file_; }
  int line() const noexcept { return line_; }      // 1-based; 0 when unknown
  int column() const noexcept { return column_; }  // 1-based; 0 when unknown

 private:
  std::string file_;
  int line_;
  int column_;
};

// Parses "4096", "64KiB", "1.5MiB", "2GB", "10 B". Throws std::invalid_argument.
std::int64_t parse_size(const std::string& text);

Scenario load_scenario_file(const std::string& path);
Scenario parse_scenario(const std::string& text, const std::string& file);

}  // namespace fhelium::harness
