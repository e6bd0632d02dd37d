package rules

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
)

// zh is Simplified Chinese.
type zh struct{}

var zhTitles = map[string]string{
	SectionYou: "与你有关", SectionQuotas: "你可以用多少", SectionQueue: "谁先开始",
	SectionWindows: "什么时候可以启动什么", SectionReservations: "提前预约", SectionLeases: "虚拟机能运行多久",
	SectionTasks: "任务", SectionIdle: "闲置的机器", SectionProfiles: "谁可以用哪些机器", SectionAlerts: "告警（管理员）",
}

func (zh) title(s string) string { return zhTitles[s] }

func (zh) list(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	last := items[len(items)-1]
	and := "和"
	if c := last[0]; c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
		and = "和 " // a space between Chinese and a number or a Latin word
	}
	return strings.Join(items[:len(items)-1], "、") + and + last
}

func (z zh) quoted(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = "“" + s + "”"
	}
	return z.list(q)
}

func (zh) dur(d time.Duration) string {
	if d <= 0 {
		return "0 分钟"
	}
	names := []string{"天", "小时", "分钟", "秒"}
	var parts []string
	for _, p := range durationParts(d) {
		parts = append(parts, fmt.Sprintf("%d %s", p[1], names[p[0]]))
	}
	return strings.Join(parts, " ")
}

func (z zh) youAre(user string, groups []string) string {
	if len(groups) == 0 {
		return fmt.Sprintf("你以“%s”的身份登录，不属于任何组。", user)
	}
	return fmt.Sprintf("你以“%s”的身份登录，属于%s组。", user, z.quoted(groups))
}

func (zh) scopeAdmin() string {
	return "你是管理员：本页列出全部规则，包括每个用户和每个组的规则。"
}

func (zh) scopeUser() string {
	return "本页列出适用于所有人的规则，以及你本人和你所在组的规则；其余规则请询问管理员。"
}

func (zh) limitsFromUser(user string) string {
	return fmt.Sprintf("你的限额来自你自己的规则（用户“%s”）。", user)
}

func (z zh) limitsFromGroups(gs []string) string {
	if len(gs) == 1 {
		return fmt.Sprintf("你的限额来自你所在的“%s”组的规则。", gs[0])
	}
	return fmt.Sprintf("你的限额取你所在的%s组规则中最宽松的：每项限额取其中最大的。", z.quoted(gs))
}

func (zh) limitsFromDefaults() string {
	return "你的限额是默认限额：你和你所在的组都没有单独的规则。"
}

func (z zh) yourProfiles(names []string) string {
	if len(names) == 0 {
		return "目前没有你可以申请的机器（配置）；请联系管理员。"
	}
	return fmt.Sprintf("你可以申请 %d 种机器（配置）：%s。", len(names), strings.Join(names, "、"))
}

func (zh) yourBooking(may, admin bool) string {
	if admin {
		return "你是管理员，可以为自己或任何人提前预约 GPU，只受空闲资源限制（见“提前预约”）。"
	}
	if may {
		return "你可以提前预约 GPU（见“提前预约”）。"
	}
	return "你不能提前预约 GPU；管理员可以替你预约。"
}

func (zh) who(w who) string {
	switch w.kind {
	case "defaults":
		return "没有单独规则（本人或所在组都没有）的人"
	case "group":
		return fmt.Sprintf("“%s”组的成员", w.name)
	case "user":
		return fmt.Sprintf("用户“%s”", w.name)
	}
	return "你"
}

func (zh) whose(w who) string {
	switch w.kind {
	case "defaults":
		return "没有单独规则的人的虚拟机"
	case "group":
		return fmt.Sprintf("“%s”组成员的虚拟机", w.name)
	case "user":
		return fmt.Sprintf("用户“%s”的虚拟机", w.name)
	}
	return "你的虚拟机"
}

func (z zh) snapshots(w who, s config.Snapshots) string {
	var parts []string
	switch {
	case s.Keep != nil && *s.Keep == 0:
		return z.who(w) + "可保留 0 个磁盘快照：不能创建快照。"
	case s.Keep != nil:
		parts = append(parts, fmt.Sprintf("最多可保留 %d 个磁盘快照", *s.Keep))
	}
	if s.ExpireAfter != nil {
		parts = append(parts, "每个磁盘快照在创建 "+z.dur(*s.ExpireAfter)+"后删除")
	}
	if len(parts) == 0 {
		return z.who(w) + "保留磁盘快照不受限制。"
	}
	if s.Keep == nil {
		return fmt.Sprintf("%s：%s。", z.who(w), parts[0])
	}
	return fmt.Sprintf("%s%s。", z.who(w), strings.Join(parts, "；"))
}

func (z zh) storage(w who, s config.StorageLimits) string {
	var parts []string
	if s.HomeQuota != nil {
		parts = append(parts, "主目录最多 "+size(*s.HomeQuota))
	}
	if s.DiskQuota != nil {
		parts = append(parts, "数据盘合计最多 "+size(*s.DiskQuota))
	}
	if len(parts) == 0 {
		return z.who(w) + "的主目录和数据盘没有大小限制。"
	}
	return fmt.Sprintf("%s可保留的%s。", z.who(w), strings.Join(parts, "，"))
}

func (z zh) quota(w who, q config.Quota) string {
	if q.VMs != nil && *q.VMs == 0 {
		return z.who(w) + "不能运行任何虚拟机。"
	}
	var counts, budgets []string
	if q.VMs != nil {
		counts = append(counts, fmt.Sprintf("%d 台虚拟机", *q.VMs))
	}
	if q.GPUs != nil {
		counts = append(counts, fmt.Sprintf("%d 块整块 GPU", *q.GPUs))
	}
	if q.Slices != nil {
		counts = append(counts, fmt.Sprintf("%d 个切片", *q.Slices))
	}
	if q.GPUMemory != nil {
		counts = append(counts, size(*q.GPUMemory)+" GPU 显存")
	}
	for _, b := range []struct {
		v    *float64
		unit string
	}{{q.GPUHoursPerDay, "每天"}, {q.GPUHoursPerWeek, "每周"}, {q.GPUHoursPerMonth, "每月"}} {
		if b.v != nil {
			budgets = append(budgets, b.unit+" "+number(*b.v)+" GPU 小时")
		}
	}
	switch {
	case len(counts) == 0 && len(budgets) == 0:
		return z.who(w) + "没有限额：GPU 够用就可以运行。"
	case len(budgets) == 0:
		return fmt.Sprintf("%s同时最多可占用 %s。", z.who(w), z.list(counts))
	case len(counts) == 0:
		return fmt.Sprintf("%s的 GPU 用量上限为%s。", z.who(w), strings.Join(budgets, "、"))
	}
	return fmt.Sprintf("%s同时最多可占用 %s，GPU 用量上限为%s。", z.who(w), z.list(counts), strings.Join(budgets, "、"))
}

func (zh) combine() string {
	return "每个人的限额：有本人的用户规则就用它；否则取其所在各组规则中最宽松的（每项限额取最大的）；都没有则用默认限额。没写的限额就是不限。"
}

func (zh) sliceNote() string {
	return "切片指 vGPU 或 MIG 实例，即 GPU 的一部分；整块 GPU 指一台虚拟机独占的 GPU。"
}

func (zh) gpuHours(zone string) string {
	return fmt.Sprintf("GPU 小时按切片占其 GPU 的份额计算（80 GB GPU 上的 1g.10gb MIG 实例占 1/7，vGPU 按其显存占 GPU 显存的比例）：在七分之一块 GPU 上用一小时计 1/7 GPU 小时。天、周（从周一开始）和月都按 %s 时区的日历计算。", zone)
}

func (zh) refuseOrWait() string {
	return "超出某项限额的申请会被立即拒绝；只需等你的其他虚拟机结束的申请会在队列中等待。"
}

func (z zh) order(order string, halfLife, maxAge time.Duration) string {
	switch order {
	case config.OrderPriority:
		return "排队的虚拟机按优先级启动，高者优先；优先级相同时先到先得。"
	case config.OrderSJF:
		return "排队的虚拟机按租期从短到长启动；租期相同时先到先得。"
	case config.OrderFairshare:
		return fmt.Sprintf("排队的虚拟机按公平份额启动：最近用 GPU 最少的人优先。过去的用量每过 %s减半计算，等待越久越靠前（最多计 %s）；份额相同时优先级高者优先，再先到先得。", z.dur(halfLife), z.dur(maxAge))
	}
	return "排队的虚拟机先到先得：按申请的先后顺序启动。"
}

func (z zh) priority(w who, p int, preemptible bool) string {
	switch {
	case p != 0 && preemptible:
		return fmt.Sprintf("%s优先级为 %d，并且可被抢占。", z.whose(w), p)
	case preemptible:
		return fmt.Sprintf("%s可被抢占。", z.whose(w))
	}
	return fmt.Sprintf("%s优先级为 %d。", z.whose(w), p)
}

func (z zh) profilePriority(ps []string, p int) string {
	return fmt.Sprintf("配置%s的虚拟机优先级加 %d。", z.quoted(ps), p)
}

func (zh) priorityAdds() string {
	return "优先级从 0 到 1000，高者优先，并且相加：虚拟机的优先级等于其配置的优先级加上其所有者的优先级（用户规则的，或所在组中最高的）。"
}

func (z zh) preemption(notice, minRuntime time.Duration) string {
	return fmt.Sprintf("排队中优先级更高且不可被抢占的虚拟机可以停掉一台可被抢占的虚拟机：其所有者会提前 %s收到通知，且虚拟机运行不满 %s不会被抢占。被抢占的虚拟机归还 GPU 但保留磁盘；再次启动时会重新排队等待 GPU。", z.dur(notice), z.dur(minRuntime))
}

func (zh) noWindows() string { return "没有时间窗口：任何虚拟机随时都可以启动。" }

var zhDays = []string{"周一", "周二", "周三", "周四", "周五", "周六", "周日"}

func (zh) whenDays(days [7]bool, start, end string, nextDay bool) string {
	var ds string
	if allDays(days) {
		ds = "每天"
	} else {
		var parts []string
		for _, r := range dayRuns(days) {
			if r[1] >= 3 {
				parts = append(parts, zhDays[r[0]]+"至"+zhDays[(r[0]+r[1]-1)%7])
				continue
			}
			for k := range r[1] {
				parts = append(parts, zhDays[(r[0]+k)%7])
			}
		}
		ds = strings.Join(parts, "、")
	}
	if nextDay {
		return fmt.Sprintf("%s %s 至次日 %s", ds, start, end)
	}
	return fmt.Sprintf("%s %s 至 %s", ds, start, end)
}

func (zh) whenSpan(fd int, from string, td int, to string) string {
	return fmt.Sprintf("%s %s 至%s %s", zhDays[fd], from, zhDays[td], to)
}

var zhClasses = map[string]string{config.ClassInteractive: "交互式", config.ClassBatch: "批处理"}

func (z zh) windowRule(classes []string, atEnd string, warn time.Duration) string {
	var may string
	switch {
	case len(classes) == 0:
		may = "任何虚拟机都不能启动"
	case len(classes) == 1:
		may = "只有" + zhClasses[classes[0]] + "虚拟机可以启动"
	default:
		may = "任何虚拟机都可以启动"
	}
	switch atEnd {
	case config.AtEndWarn:
		return fmt.Sprintf("%s；窗口结束前 %s，在窗口内启动的虚拟机的所有者会收到提醒", may, z.dur(warn))
	case config.AtEndStop:
		return fmt.Sprintf("%s；窗口结束时，在窗口内启动的虚拟机会被停止，其所有者提前 %s收到通知", may, z.dur(warn))
	}
	return may
}

func (zh) window(name, when, zone, rule string) string {
	return fmt.Sprintf("窗口“%s”，%s（%s 时间）：%s。", name, when, zone, rule)
}

func (zh) outsideWindows() string { return "在这些窗口之外，任何虚拟机都可以启动。" }

func (zh) batchNote() string {
	return "不可被抢占的批处理虚拟机，如果其租期会进入不允许批处理启动的窗口，就不会启动。"
}

func (z zh) classes(batch []string, others bool) string {
	switch {
	case len(batch) == 0:
		return "所有机器都是交互式的。"
	case !others:
		return "所有机器都是批处理的。"
	}
	return fmt.Sprintf("配置%s的机器是批处理的；其余是交互式的。", z.quoted(batch))
}

func (zh) noBooking(admin bool) string {
	if admin {
		return "策略中没有 reservations 块：除管理员外，任何人都不能提前预约 GPU。你可以为自己或任何人预约；添加 reservations 块即可让其他人预约。"
	}
	return "本服务器不提供提前预约 GPU；管理员可以替你预约。"
}

func (z zh) profilesWord(ps []string) string {
	if len(ps) == 0 {
		return "任何机器"
	}
	return "配置" + z.quoted(ps)
}

func (z zh) bookers(users, groups, profiles []string) string {
	var who string
	switch {
	case len(users) == 0 && len(groups) == 0:
		who = "所有人"
	case len(users) == 0:
		who = z.quoted(groups) + "组的成员"
	case len(groups) == 0:
		who = "用户" + z.quoted(users)
	default:
		who = z.quoted(groups) + "组的成员和用户" + z.quoted(users)
	}
	return fmt.Sprintf("%s可以为%s提前预约 GPU。", who, z.profilesWord(profiles))
}

func (z zh) youMayBook(may bool, profiles []string) string {
	if !may {
		return "你不能提前预约 GPU；只有部分人可以，管理员可以替你预约。"
	}
	return fmt.Sprintf("你可以为%s提前预约 GPU。", z.profilesWord(profiles))
}

func (z zh) bookingLimits(ahead, length time.Duration, vms, active int) string {
	return fmt.Sprintf("预约最多可提前 %s开始，最长 %s，最多 %d 台虚拟机；每人同时最多持有 %d 个预约。", z.dur(ahead), z.dur(length), vms, active)
}

func (zh) bookingEffect() string {
	return "预约占用 GPU 期间，租期会进入该预约的其他虚拟机不会在这些 GPU 上启动。"
}

func (z zh) lease(ps []string, l config.Lease) string {
	var b strings.Builder
	fmt.Fprintf(&b, "配置%s：虚拟机默认运行 %s（可申请其他时长），连同延期最长 %s", z.quoted(ps), z.dur(l.Default), z.dur(l.Max))
	if l.WarnBefore > 0 {
		fmt.Fprintf(&b, "；结束前 %s提醒所有者", z.dur(l.WarnBefore))
	}
	switch l.OnEnd {
	case config.LeaseEndDelete:
		b.WriteString("；到期后连同磁盘一起删除。")
	case config.LeaseEndKeep:
		b.WriteString("；到期后停止并保留，直到所有者延期或删除它。")
	default:
		fmt.Fprintf(&b, "；到期后停止，如所有者未延期，%s后删除。", z.dur(l.Grace))
	}
	return b.String()
}

func (zh) extend() string {
	return "你可以延长租期，但从虚拟机启动时算起不超过其配置的最长租期，也不能超过其所在预约或会停止它的窗口的结束时间，也不能占用为别人预约的 GPU。"
}

func (zh) notices(webhook, admin bool, host string) string {
	switch {
	case webhook && admin:
		return fmt.Sprintf("给所有者的通知（租期即将结束、虚拟机被规则停止）会作为事件出现在门户和“gpuvm events”中，同时发送到 %s 的 webhook。", host)
	case webhook:
		return "给你的通知（租期即将结束、虚拟机被规则停止）会作为事件出现在门户和“gpuvm events”中，同时发送到本站的通知 webhook。"
	}
	return "给你的通知（租期即将结束、虚拟机被规则停止）会作为事件出现在门户和“gpuvm events”中。"
}

func (z zh) taskProfiles(ps []string) string {
	return fmt.Sprintf("任务（“gpuvm task submit”或门户的“任务”页面）在配置%s的一台新虚拟机里运行一条命令，命令一结束就归还 GPU：虚拟机随之删除。", z.quoted(ps))
}

func (z zh) taskLimit(killWait, maxKillWait time.Duration) string {
	return fmt.Sprintf("任务的时间限制不超过其配置最长的租期。到达限制时，命令先收到 SIGTERM，%s后收到 SIGKILL（任务可设为最多 %s），然后虚拟机关机：任务以超时结束。", z.dur(killWait), z.dur(maxKillWait))
}

func (z zh) taskQueue(batch []string, windows bool) string {
	s := "任务和虚拟机在同一个队列里等待，受同样的配额和预约约束，并说明为什么等待、预计何时开始。"
	if len(batch) > 0 && windows {
		s += fmt.Sprintf("配置%s的任务是批处理工作：只在允许批处理虚拟机启动的时段里启动。", z.quoted(batch))
	}
	return s
}

func (zh) taskRepeat(retries, elements int) string {
	return fmt.Sprintf("任务可以在它列出的退出码上重新运行，最多 %d 次；一个任务数组最多运行同一命令的 %d 个元素，每个元素有自己的 TASK_INDEX。", retries, elements)
}

func (z zh) idleStop(ps []string, d time.Duration) string {
	return fmt.Sprintf("配置%s的虚拟机，如果 GPU（没有 GPU 的则为 CPU）闲置达 %s，就会被停止：归还 GPU，保留磁盘。", z.quoted(ps), z.dur(d))
}

func (zh) idleMeans(th float64) string {
	return fmt.Sprintf("闲置指使用率低于 %s%%。", number(th))
}

func (zh) othersNeverIdle() string { return "其他配置的虚拟机不会因闲置而被停止。" }

func (zh) noIdle() string { return "没有虚拟机会因闲置而被停止。" }

func (zh) noProfiles() string { return "没有你可以使用的机器（配置）。" }

func (z zh) openProfiles(names []string) string {
	return fmt.Sprintf("所有人都可以使用%s。", z.quoted(names))
}

func (z zh) restricted(p string, groups, users []string) string {
	var who []string
	if len(groups) > 0 {
		who = append(who, z.quoted(groups)+"组的成员")
	}
	if len(users) > 0 {
		who = append(who, "用户"+z.quoted(users))
	}
	return fmt.Sprintf("只有%s可以使用“%s”。", z.list(who), p)
}

func (z zh) restrictedYou(p string, via []string, named bool) string {
	switch {
	case len(via) > 0:
		return fmt.Sprintf("“%s”供%s组的成员使用，所以你可以使用。", p, z.quoted(via))
	case named:
		return fmt.Sprintf("“%s”只供部分人使用，你是其中之一。", p)
	}
	return fmt.Sprintf("“%s”只供部分人使用。", p)
}

func (z zh) alert(name, metric string, above, below *float64, d time.Duration, host string) string {
	var cond string
	switch {
	case above != nil && below != nil:
		cond = fmt.Sprintf("高于 %s 或低于 %s", number(*above), number(*below))
	case above != nil:
		cond = "高于 " + number(*above)
	default:
		cond = "低于 " + number(*below)
	}
	return fmt.Sprintf("告警“%s”：%s 持续 %s%s时触发，并发送到 %s。", name, metric, z.dur(d), cond, host)
}
