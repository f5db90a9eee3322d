#include "edge/device_policy.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace plexus::edge {
namespace {

std::optional<std::string> ReadLine(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

std::optional<double> ReadNumber(const std::filesystem::path& p) {
  auto line = ReadLine(p);
  if (!line) return std::nullopt;
  try {
    return std::stod(*line);
  } catch (...) {
    return std::nullopt;
  }
}

bool MeteredInterface(const std::string& name) {
  for (const char* prefix : {"wwan", "rmnet", "ccmni", "ppp", "usb"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

}  // namespace

DeviceState ReadDeviceState(const std::string& sysfs_root, const std::string& procfs_root) {
  namespace fs = std::filesystem;
  DeviceState s;
  std::error_code ec;
  bool supply_online = false, battery_charging = false;
  const fs::path supplies = fs::path(sysfs_root) / "class/power_supply";
  for (const auto& e : fs::directory_iterator(supplies, ec)) {
    const std::string type = ReadLine(e.path() / "type").value_or("");
    if (type == "Battery") {
      s.has_battery = true;
      if (auto c = ReadNumber(e.path() / "capacity")) s.battery_pct = *c;
      const std::string status = ReadLine(e.path() / "status").value_or("");
      battery_charging = battery_charging || status == "Charging" || status == "Full";
    } else if (ReadNumber(e.path() / "online").value_or(0) > 0) {
      supply_online = true;  // Mains, USB, ...
    }
  }
  s.charging = !s.has_battery || supply_online || battery_charging;
  const fs::path thermal = fs::path(sysfs_root) / "class/thermal";
  for (const auto& e : fs::directory_iterator(thermal, ec)) {
    if (e.path().filename().string().rfind("thermal_zone", 0) != 0) continue;
    if (auto t = ReadNumber(e.path() / "temp")) {
      const double c = *t / 1000.0;
      s.max_temp_c = s.max_temp_c ? std::max(*s.max_temp_c, c) : c;
    }
  }
  // /proc/net/route: Iface Destination Gateway ...; the default route has destination 00000000.
  std::ifstream route(fs::path(procfs_root) / "net/route");
  std::string line;
  std::getline(route, line);  // header
  while (std::getline(route, line)) {
    std::istringstream fields(line);
    std::string iface, destination;
    if (fields >> iface >> destination && destination == "00000000") {
      s.route_interfaces.push_back(iface);
      s.metered = s.metered || MeteredInterface(iface);
    }
  }
  return s;
}

std::string WhyNotNow(const DeviceConditions& c, const DeviceState& s) {
  char buf[160];
  if (c.require_charging && !s.charging) return "the device is not charging (--require-charging)";
  if (c.min_battery_pct > 0 && s.has_battery && s.battery_pct < c.min_battery_pct) {
    std::snprintf(buf, sizeof buf, "battery at %.0f%% (below --min-battery %.0f%%)", s.battery_pct, c.min_battery_pct);
    return buf;
  }
  if (c.max_temp_c > 0 && s.max_temp_c && *s.max_temp_c > c.max_temp_c) {
    std::snprintf(buf, sizeof buf, "at %.1f C (above --max-temp-c %.1f)", *s.max_temp_c, c.max_temp_c);
    return buf;
  }
  if (c.unmetered_only && s.metered) {
    std::string ifaces;
    for (const std::string& i : s.route_interfaces) ifaces += (ifaces.empty() ? "" : ",") + i;
    return "on a metered network (" + ifaces + "; --unmetered-only)";
  }
  return "";
}

std::string WhyNotNow(const DeviceConditions& c) {
  if (!c.any()) return "";
  return WhyNotNow(c, ReadDeviceState(c.sysfs_root, c.procfs_root));
}

}  // namespace plexus::edge
