#pragma once
/// \file
/// A pass over JSON text that builds nothing (nlohmann's SAX interface): the nesting depth
/// bounded, the first problem kept. The file formats' readers derive from it to look at what
/// they need (keys in order, duplicates, integers beyond 64 bits) before anything is parsed.

#include <cstddef>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace tensordict::format::detail {

class JsonScan : public nlohmann::json_sax<nlohmann::json> {
 public:
  /// The first problem found ("" when none); the scan stops there.
  std::string problem;

  /// `max_depth`: objects and arrays nested deeper are a problem, described by `too_deep`.
  JsonScan(std::size_t max_depth, std::string too_deep) : max_depth_(max_depth), too_deep_(std::move(too_deep)) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return enter(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return enter(); }
  bool end_array() override { return --depth_, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    return stop(std::string("malformed JSON (") + e.what() + ")");
  }

 protected:
  /// The depth of the value being read: 1 inside the top-level object.
  std::size_t depth() const noexcept { return depth_; }
  bool enter() {
    if (++depth_ > max_depth_) return stop(too_deep_);
    return true;
  }
  bool stop(std::string why) {
    if (problem.empty()) problem = std::move(why);
    return false;
  }

 private:
  std::size_t depth_ = 0;
  std::size_t max_depth_;
  std::string too_deep_;
};

}  // namespace tensordict::format::detail
