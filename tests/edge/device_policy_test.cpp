#include "edge/device_policy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace plexus::edge {
namespace {

// A fake sysfs and procfs tree in a temporary directory.
class DevicePolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("plexus_sysfs_" + std::to_string(::getpid()) + "_" +
                                                      ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    c_.sysfs_root = (root_ / "sys").string();
    c_.procfs_root = (root_ / "proc").string();
    Route("wlan0");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void Write(const std::string& path, const std::string& text) {
    const std::filesystem::path p = root_ / path;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
  }
  void Battery(int pct, const std::string& status) {
    Write("sys/class/power_supply/BAT0/type", "Battery");
    Write("sys/class/power_supply/BAT0/capacity", std::to_string(pct));
    Write("sys/class/power_supply/BAT0/status", status);
  }
  void Mains(bool online) {
    Write("sys/class/power_supply/AC/type", "Mains");
    Write("sys/class/power_supply/AC/online", online ? "1" : "0");
  }
  void Zone(int i, int millidegrees) {
    Write("sys/class/thermal/thermal_zone" + std::to_string(i) + "/temp", std::to_string(millidegrees));
  }
  void Route(const std::string& iface) {
    Write("proc/net/route",
          "Iface\tDestination\tGateway \tFlags\n" + iface + "\t00000000\t0101A8C0\t0003\nlo\t0000007F\t00000000\t0001");
  }
  std::string Why() { return WhyNotNow(c_); }

  std::filesystem::path root_;
  DeviceConditions c_;
};

TEST_F(DevicePolicyTest, NoConditionsNeverBlock) {
  Battery(3, "Discharging");
  Zone(0, 99000);
  Route("wwan0");
  EXPECT_EQ(Why(), "");
}

TEST_F(DevicePolicyTest, LowBattery) {
  c_.min_battery_pct = 20;
  Battery(15, "Discharging");
  Mains(false);
  EXPECT_EQ(Why(), "battery at 15% (below --min-battery 20%)");
  Battery(25, "Discharging");
  EXPECT_EQ(Why(), "");
}

TEST_F(DevicePolicyTest, DischargingWhenChargingIsRequired) {
  c_.require_charging = true;
  Battery(80, "Discharging");
  Mains(false);
  EXPECT_EQ(Why(), "the device is not charging (--require-charging)");
  Mains(true);
  EXPECT_EQ(Why(), "");
  Mains(false);
  Battery(80, "Charging");
  EXPECT_EQ(Why(), "");
}

TEST_F(DevicePolicyTest, ADeviceWithoutBatteryIsMainsPowered) {
  c_.require_charging = true;
  c_.min_battery_pct = 50;
  const DeviceState s = ReadDeviceState(c_.sysfs_root, c_.procfs_root);
  EXPECT_FALSE(s.has_battery);
  EXPECT_TRUE(s.charging);
  EXPECT_EQ(Why(), "");
}

TEST_F(DevicePolicyTest, HotDevice) {
  c_.max_temp_c = 70;
  Zone(0, 45000);
  Zone(1, 81500);
  EXPECT_EQ(Why(), "at 81.5 C (above --max-temp-c 70.0)");
  Zone(1, 69000);
  EXPECT_EQ(Why(), "");
}

TEST_F(DevicePolicyTest, MeteredNetwork) {
  c_.unmetered_only = true;
  Route("wwan0");
  EXPECT_EQ(Why(), "on a metered network (wwan0; --unmetered-only)");
  Route("eth0");
  EXPECT_EQ(Why(), "");
}

}  // namespace
}  // namespace plexus::edge
