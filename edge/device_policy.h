// Device policy: when a battery-powered device may train (`plexus client --require-charging
// --min-battery PCT --max-temp-c C --unmetered-only`). Read from Linux sysfs and procfs, whose
// roots are parameters so that tests use a fake tree:
//   power supplies  SYSFS/class/power_supply/*/{type,online,capacity,status}: a device with no
//                   battery is taken as mains-powered (charging, 100%); charging means a Mains or
//                   USB supply online, or a battery Charging or Full
//   temperature     SYSFS/class/thermal/thermal_zone*/temp (millidegrees C): the hottest zone
//   metered         the interfaces of the default route (PROCFS/net/route): cellular and
//                   tethering ones (wwan*, rmnet*, ccmni*, ppp*, usb*) count as metered
// Stateless functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace plexus::edge {

struct DeviceConditions {
  bool require_charging = false;
  double min_battery_pct = 0;  // 0: any level
  double max_temp_c = 0;       // 0: no limit
  bool unmetered_only = false;
  std::string sysfs_root = "/sys";
  std::string procfs_root = "/proc";
  bool any() const { return require_charging || min_battery_pct > 0 || max_temp_c > 0 || unmetered_only; }
};

struct DeviceState {
  bool has_battery = false;
  double battery_pct = 100;
  bool charging = true;
  std::optional<double> max_temp_c;           // none: no thermal zone readable
  std::vector<std::string> route_interfaces;  // of the default route
  bool metered = false;
};

DeviceState ReadDeviceState(const std::string& sysfs_root, const std::string& procfs_root);

// Why the device may not train now under `c` (e.g. "battery at 15% (below 20%)"), or empty when
// it may.
std::string WhyNotNow(const DeviceConditions& c, const DeviceState& s);
// Reads the state and answers.
std::string WhyNotNow(const DeviceConditions& c);

}  // namespace plexus::edge
