#include "settings.h"

#include <cctype>
#include <limits>

#include "json.h"  // native/common

namespace fastpath_cache {

namespace {

bool ParseUnsigned(const std::string& text, uint64_t max, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10) return false;
    v = v * 10 + digit;
  }
  if (v > max) return false;
  *out = v;
  return true;
}

}  // namespace

bool ParseFlatJsonObject(const std::string& text, std::map<std::string, std::string>* out, std::string* error) {
  out->clear();
  fastpath::Json json;
  if (!fastpath::ParseJson(text, &json, error)) return false;
  if (json.kind != fastpath::Json::Kind::kObject) {
    *error = "expected a JSON object";
    return false;
  }
  for (const auto& member : json.members) {
    const fastpath::Json::Kind kind = member.second.kind;
    if (kind != fastpath::Json::Kind::kString && kind != fastpath::Json::Kind::kNumber &&
        kind != fastpath::Json::Kind::kBool) {
      *error = "expected a string, number or boolean for key '" + member.first + "'";
      return false;
    }
    if (!out->emplace(member.first, member.second.text).second) {
      *error = "key '" + member.first + "' appears twice";
      return false;
    }
  }
  return true;
}

bool ValidNamespace(const std::string& ns) {
  if (ns.empty() || ns.size() > 128) return false;
  for (char c : ns) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

bool ValidEnvName(const std::string& name) {
  if (name.empty() || name.size() > 128 || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

bool ParseSettings(const std::string& json, CacheSettings* settings, std::string* error) {
  std::map<std::string, std::string> values;
  if (!ParseFlatJsonObject(json, &values, error)) {
    *error = "cache config: " + *error;
    return false;
  }
  CacheSettings s;
  for (const auto& item : values) {
    const std::string& key = item.first;  // not a structured binding: lambdas below capture these
    const std::string& value = item.second;
    uint64_t n = 0;
    auto number = [&](uint64_t low, uint64_t high) {
      if (!ParseUnsigned(value, high, &n) || n < low) {
        *error = "cache config: " + key + "=" + value + "; expected an integer in " + std::to_string(low) + ".." +
                 std::to_string(high);
        return false;
      }
      return true;
    };
    constexpr uint64_t kDay = 86'400;
    constexpr uint64_t kYearS = 365 * kDay;
    if (key == "size") {
      if (!number(0, uint64_t{1} << 40)) return false;
      s.l1_bytes = n;
    } else if (key == "max_entry_bytes") {
      if (!number(1, uint64_t{1} << 32)) return false;
      s.max_entry_bytes = n;
    } else if (key == "l1_ttl_s") {
      if (!number(0, kYearS)) return false;
      s.l1_ttl_ms = n * 1000;
    } else if (key == "l2_ttl_s") {
      if (!number(0, kYearS)) return false;
      s.l2_ttl_ms = n * 1000;
    } else if (key == "redis_url") {
      s.redis_url = value;
    } else if (key == "password_env" || key == "mac_secret_env") {
      if (!ValidEnvName(value)) {
        *error = "cache config: " + key + "='" + value + "'; expected an environment variable's name";
        return false;
      }
      (key == "password_env" ? s.password_env : s.mac_secret_env) = value;
    } else if (key == "key_prefix") {
      if (value.size() > 64 || value.find_first_of(" \t\r\n") != std::string::npos) {
        *error = "cache config: key_prefix must be at most 64 characters without spaces";
        return false;
      }
      s.key_prefix = value;
    } else if (key == "namespace") {
      if (!ValidNamespace(value)) {
        *error = "cache config: namespace='" + value + "'; expected 1-128 of [A-Za-z0-9._-]";
        return false;
      }
      s.ns = value;
    } else if (key == "connect_timeout_ms") {
      if (!number(1, 60'000)) return false;
      s.connect_timeout_ms = static_cast<int>(n);
    } else if (key == "timeout_ms") {
      if (!number(1, 60'000)) return false;
      s.timeout_ms = static_cast<int>(n);
    } else if (key == "breaker_failures") {
      if (!number(1, 1000)) return false;
      s.breaker_failures = static_cast<int>(n);
    } else if (key == "breaker_open_ms") {
      if (!number(1, 3'600'000)) return false;
      s.breaker_open_ms = static_cast<int>(n);
    } else if (key == "pool_size") {
      if (!number(1, 256)) return false;
      s.pool_size = static_cast<int>(n);
    } else if (key == "write_queue") {
      if (!number(1, 1'000'000)) return false;
      s.write_queue = n;
    } else if (key == "write_queue_bytes") {
      if (!number(uint64_t{1} << 16, uint64_t{1} << 40)) return false;
      s.write_queue_bytes = n;
    } else if (key == "l2_bypass") {
      if (value != "adaptive" && value != "off") {
        *error = "cache config: l2_bypass=" + value + "; expected adaptive or off";
        return false;
      }
      s.l2_bypass = value == "adaptive";
    } else if (key == "l2_bypass_window") {
      if (!number(1, 1'000'000)) return false;
      s.l2_bypass_window = static_cast<uint32_t>(n);
    } else if (key == "l2_bypass_min_hits") {
      if (!number(1, 1'000'000)) return false;
      s.l2_bypass_min_hits = static_cast<uint32_t>(n);
    } else if (key == "l2_bypass_max_interval") {
      if (!number(2, 1'000'000)) return false;
      s.l2_bypass_max_interval = static_cast<uint32_t>(n);
    } else if (key == "l2_bypass_probe_ms") {
      if (!number(0, 3'600'000)) return false;
      s.l2_bypass_probe_ms = n;
    } else {
      *error = "cache config: unknown key '" + key +
               "'; expected size, max_entry_bytes, l1_ttl_s, l2_ttl_s, redis_url, password_env, key_prefix, "
               "namespace, connect_timeout_ms, timeout_ms, breaker_failures, breaker_open_ms, pool_size, write_queue, "
               "write_queue_bytes, mac_secret_env, l2_bypass, l2_bypass_window, l2_bypass_min_hits, "
               "l2_bypass_max_interval, l2_bypass_probe_ms";
      return false;
    }
  }
  if (s.l2_bypass_min_hits > s.l2_bypass_window) {
    *error = "cache config: l2_bypass_min_hits=" + std::to_string(s.l2_bypass_min_hits) +
             "; expected at most l2_bypass_window (" + std::to_string(s.l2_bypass_window) + ")";
    return false;
  }
  if (s.max_entry_bytes == 0) s.max_entry_bytes = s.l1_bytes ? s.l1_bytes / 4 : (uint64_t{16} << 20);
  if (s.l1_bytes && s.max_entry_bytes > s.l1_bytes) s.max_entry_bytes = s.l1_bytes;
  if (!s.redis_url.empty()) {
    RedisAddress address;
    if (!ParseRedisUrl(s.redis_url, &address, error)) {
      *error = "cache config: redis_url: " + *error;
      return false;
    }
    if (s.ns.empty()) {
      *error = "cache config: redis_url is set but namespace is not; expected namespace=<the served models' "
               "identity> (1-128 of [A-Za-z0-9._-]; `fastpath serve` passes a hash of the model repository), so "
               "that servers of other models or builds sharing this Redis never read each other's entries";
      return false;
    }
  }
  *settings = s;
  return true;
}

bool ParseRedisUrl(const std::string& url, RedisAddress* out, std::string* error) {
  const std::string scheme = "redis://";
  if (url.compare(0, scheme.size(), scheme) != 0) {
    *error = "expected redis://host:port/db (got a URL that does not start with redis://)";
    return false;
  }
  std::string rest = url.substr(scheme.size());
  RedisAddress a;
  const size_t at = rest.rfind('@');
  if (at != std::string::npos) {
    const std::string userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = userinfo.find(':');
    const std::string user = colon == std::string::npos ? "" : userinfo.substr(0, colon);
    a.password = colon == std::string::npos ? userinfo : userinfo.substr(colon + 1);
    if (!user.empty() && user != "default") {
      *error = "a Redis user other than 'default' is not supported";
      return false;
    }
  }
  std::string path;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    path = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  std::string port_text;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:port
    const size_t close = rest.find(']');
    if (close == std::string::npos) {
      *error = "unclosed '[' in the host";
      return false;
    }
    a.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') {
        *error = "expected ':' after ']'";
        return false;
      }
      port_text = rest.substr(close + 2);
    }
  } else {
    const size_t colon = rest.rfind(':');
    a.host = colon == std::string::npos ? rest : rest.substr(0, colon);
    if (colon != std::string::npos) port_text = rest.substr(colon + 1);
  }
  if (a.host.empty()) {
    *error = "no host";
    return false;
  }
  uint64_t n = 0;
  if (!port_text.empty()) {
    if (!ParseUnsigned(port_text, 65535, &n) || n == 0) {
      *error = "port '" + port_text + "' is not in 1..65535";
      return false;
    }
    a.port = static_cast<int>(n);
  }
  if (!path.empty()) {
    if (!ParseUnsigned(path, 1 << 20, &n)) {
      *error = "database '" + path + "' is not a number";
      return false;
    }
    a.db = static_cast<int>(n);
  }
  *out = a;
  return true;
}

std::string RedactedUrl(const std::string& url) {
  const size_t scheme_end = url.find("://");
  const size_t at = url.rfind('@');
  if (scheme_end == std::string::npos || at == std::string::npos || at < scheme_end) return url;
  return url.substr(0, scheme_end + 3) + "<redacted>@" + url.substr(at + 1);
}

}  // namespace fastpath_cache
