#include "daemon/device_pool.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include <boost/asio/post.hpp>

namespace keval::daemon {

namespace json = boost::json;

namespace {

bool wants(const json::array& types, std::string_view type) {
  return std::any_of(types.begin(), types.end(),
                     [&](const json::value& t) { return t.is_string() && t.as_string() == type; });
}

std::string offered(const json::array& types) {
  std::string text;
  for (const auto& t : types)
    if (t.is_string())
      text += (text.empty() ? "" : ", ") + std::string(t.as_string());
  return text.empty() ? "none" : text;
}

} // namespace

json::object DeviceGrant::to_protocol() const {
  if (type.empty())
    return json::object{{"error", error}};
  json::object grant{{"device", json::object{{"type", type}, {"index", index}}}};
  if (type == "cuda") // a leased GPU: the pool takes it back early (hand_over)
    grant["handover"] = true;
  if (!quiet)
    grant["quiet"] = false;
  return grant;
}

json::object DeviceGrant::to_json() const {
  return json::object{{"type", type}, {"index", index}, {"gpu_type", gpu_type}};
}

DevicePool::DevicePool(boost::asio::any_io_executor executor, std::vector<GpuDevice> gpus,
                       size_t jobs_per_gpu)
    : executor_(std::move(executor)), jobs_per_gpu_(std::max<size_t>(1, jobs_per_gpu)) {
  for (auto& gpu : gpus) {
    Slot slot;
    slot.device = std::move(gpu);
    slots_.push_back(std::move(slot));
  }
}

bool DevicePool::fits(const Slot& slot, const DeviceWish& wish) const {
  return (!wish.gpu_type || slot.device.gpu_type == *wish.gpu_type) &&
         (wish.arch == 0 || slot.device.arch == wish.arch);
}

// A GPU's jobs that handed it over do not count against its limit.
bool DevicePool::is_free(const Slot& slot) const {
  return slot.holders - slot.departing < jobs_per_gpu_;
}

std::optional<size_t> DevicePool::opened_slot(const DeviceWish& wish) const {
  if (!wish.opened_cuda)
    return std::nullopt;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].device.index == *wish.opened_cuda)
      return fits(slots_[i], wish) && is_free(slots_[i]) ? std::optional(i) : std::nullopt;
  return std::nullopt;
}

std::optional<size_t> DevicePool::free_slot(const DeviceWish& wish) const {
  if (auto opened = opened_slot(wish))
    return opened;
  // Among the free, the one with fewest holders of any kind (a quiet GPU before one whose last
  // job is still ending).
  std::optional<size_t> best;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (fits(slots_[i], wish) && is_free(slots_[i]) &&
        (!best || slots_[i].holders < slots_[*best].holders))
      best = i;
  return best;
}

DeviceGrant DevicePool::take(size_t slot_index, Ticket ticket, std::function<void()> on_quiet) {
  Slot& slot = slots_[slot_index];
  if (slot.holders++ == 0)
    slot.busy_since = Clock::now();
  ++slot.grants;
  held_[ticket] = Held{slot_index, false};
  DeviceGrant grant{"cuda", slot.device.index, slot.device.gpu_type, {}};
  grant.quiet = slot.departing == 0;
  if (!grant.quiet && on_quiet)
    slot.awaiting_quiet.emplace_back(ticket, std::move(on_quiet));
  return grant;
}

void DevicePool::deliver(std::function<void(DeviceGrant)> on_grant, DeviceGrant grant) {
  boost::asio::post(
      executor_, [on_grant = std::move(on_grant), grant = std::move(grant)]() { on_grant(grant); });
}

DevicePool::Ticket DevicePool::acquire(DeviceWish wish, std::function<void(DeviceGrant)> on_grant,
                                       std::function<void()> on_quiet) {
  std::lock_guard lock(mutex_);
  const Ticket ticket = next_ticket_++;
  const bool any_gpu_fits =
      std::any_of(slots_.begin(), slots_.end(), [&](const Slot& slot) { return fits(slot, wish); });
  if (wants(wish.device_types, "cuda") && any_gpu_fits) {
    if (auto slot = free_slot(wish))
      deliver(std::move(on_grant), take(*slot, ticket, std::move(on_quiet)));
    else
      waiting_.push_back(Waiter{ticket, std::move(wish), std::move(on_grant), std::move(on_quiet)});
    return ticket;
  }
  if (wants(wish.device_types, "cpu")) {
    held_[ticket] = Held{};
    deliver(std::move(on_grant), DeviceGrant{"cpu", 0, "cpu", {}});
    return ticket;
  }
  DeviceGrant refusal;
  if (!wants(wish.device_types, "cuda"))
    refusal.error = "the job needs a device of type " + offered(wish.device_types) +
                    " and this host offers cuda and cpu only";
  else if (wish.gpu_type)
    refusal.error = "this host has no GPU of type " + *wish.gpu_type;
  else if (slots_.empty())
    refusal.error = "this host has no CUDA device the daemon can use";
  else
    refusal.error = "no GPU on this host has compute capability " + std::to_string(wish.arch);
  deliver(std::move(on_grant), std::move(refusal));
  return ticket;
}

void DevicePool::hand_over(Ticket ticket) {
  std::lock_guard lock(mutex_);
  auto held = held_.find(ticket);
  if (held == held_.end() || !held->second.slot || held->second.departing)
    return;
  held->second.departing = true;
  Slot& slot = slots_[*held->second.slot];
  ++slot.departing;
  forget_quiet_wish(slot, ticket); // it times nothing more
  grant_waiters();
}

void DevicePool::release(Ticket ticket) {
  std::lock_guard lock(mutex_);
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(),
                             [&](const Waiter& w) { return w.ticket == ticket; });
      it != waiting_.end()) {
    waiting_.erase(it);
    return;
  }
  auto held = held_.find(ticket);
  if (held == held_.end())
    return;
  const Held was = held->second;
  held_.erase(held);
  if (!was.slot)
    return; // the CPU device is shared and never waited for
  Slot& slot = slots_[*was.slot];
  forget_quiet_wish(slot, ticket);
  if (--slot.holders == 0)
    slot.busy_ms +=
        std::chrono::duration<double, std::milli>(Clock::now() - slot.busy_since).count();
  if (was.departing && --slot.departing == 0) {
    // The last job handing it over is gone: those granted it meanwhile may time now.
    for (auto& [waiting_ticket, on_quiet] : slot.awaiting_quiet)
      boost::asio::post(executor_, std::move(on_quiet));
    slot.awaiting_quiet.clear();
  }
  grant_waiters();
}

void DevicePool::forget_quiet_wish(Slot& slot, Ticket ticket) {
  std::erase_if(slot.awaiting_quiet, [&](const auto& wish) { return wish.first == ticket; });
}

// First, in arrival order, the waiters whose worker opened a free GPU ahead and those passed over
// often enough; then FIFO among the waiters each free GPU fits. A waiter for another type or arch
// does not block them.
void DevicePool::grant_waiters() {
  const size_t patience = slots_.size() > 1 ? slots_.size() - 1 : 1; // see the header
  std::vector<std::pair<Ticket, size_t>> granted_first;              // ticket, slot
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const auto slot = it->passed_over >= patience ? free_slot(it->wish) : opened_slot(it->wish);
    if (slot) {
      granted_first.emplace_back(it->ticket, *slot);
      deliver(std::move(it->on_grant), take(*slot, it->ticket, std::move(it->on_quiet)));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  for (Waiter& waiter : waiting_)
    if (std::any_of(granted_first.begin(), granted_first.end(), [&](const auto& grant) {
          return grant.first > waiter.ticket && fits(slots_[grant.second], waiter.wish);
        }))
      ++waiter.passed_over;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (auto free = free_slot(it->wish)) {
      deliver(std::move(it->on_grant), take(*free, it->ticket, std::move(it->on_quiet)));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

int DevicePool::compile_arch(const std::optional<std::string>& gpu_type) const {
  std::lock_guard lock(mutex_);
  return least_loaded_arch(gpu_type);
}

int DevicePool::reserve_compile_arch(const std::optional<std::string>& gpu_type) {
  std::lock_guard lock(mutex_);
  const int arch = least_loaded_arch(gpu_type);
  if (arch != 0)
    ++compiling_[arch];
  return arch;
}

void DevicePool::end_compile_reservation(int arch) {
  std::lock_guard lock(mutex_);
  if (auto it = compiling_.find(arch); it != compiling_.end() && --it->second == 0)
    compiling_.erase(it);
}

int DevicePool::least_loaded_arch(const std::optional<std::string>& gpu_type) const {
  struct Load {
    size_t gpus = 0;
    size_t jobs = 0; // holding, waiting or compiling
  };
  std::map<int, Load> by_arch;
  for (const auto& slot : slots_)
    if (!gpu_type || slot.device.gpu_type == *gpu_type) {
      by_arch[slot.device.arch].gpus += 1;
      by_arch[slot.device.arch].jobs += slot.holders;
    }
  for (const auto& waiter : waiting_)
    if (auto it = by_arch.find(waiter.wish.arch); it != by_arch.end())
      it->second.jobs += 1;
  for (const auto& [arch, jobs] : compiling_)
    if (auto it = by_arch.find(arch); it != by_arch.end())
      it->second.jobs += jobs;
  int best = 0;
  double best_load = 0;
  for (const auto& [arch, load] : by_arch) { // ascending arch: ties go to the newer one
    const double per_gpu = static_cast<double>(load.jobs) / static_cast<double>(load.gpus);
    if (best == 0 || per_gpu <= best_load) {
      best = arch;
      best_load = per_gpu;
    }
  }
  return best;
}

bool DevicePool::has_gpu_type(std::string_view gpu_type) const {
  std::lock_guard lock(mutex_);
  return std::any_of(slots_.begin(), slots_.end(),
                     [&](const Slot& slot) { return slot.device.gpu_type == gpu_type; });
}

std::string DevicePool::uniform_gpu_type() const {
  std::lock_guard lock(mutex_);
  if (slots_.empty())
    return {};
  for (const auto& slot : slots_)
    if (slot.device.gpu_type != slots_.front().device.gpu_type)
      return {};
  return slots_.front().device.gpu_type;
}

std::vector<GpuState> DevicePool::snapshot() const {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  std::vector<GpuState> states;
  for (const auto& slot : slots_) {
    GpuState state{slot.device, slot.holders, slot.departing, slot.grants, slot.busy_ms};
    if (slot.holders > 0)
      state.busy_ms += std::chrono::duration<double, std::milli>(now - slot.busy_since).count();
    states.push_back(std::move(state));
  }
  return states;
}

size_t DevicePool::waiting() const {
  std::lock_guard lock(mutex_);
  return waiting_.size();
}

} // namespace keval::daemon
