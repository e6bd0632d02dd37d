package i18n

import "strings"

// zh are the sentences gpuvmd writes, in Simplified Chinese. The more
// particular pattern of two that could match the same sentence comes
// first.
var zh = [][2]string{
	// What a VM's state allows (pkg/capability), in GET /v1/vms/{id}:
	// before the general patterns below, which would take their parts.
	{"profile {p} is no longer configured", "配置中已没有配置文件 {p}"},
	{"the VM has no disk (it boots a kernel directly)", "该虚拟机没有磁盘（它直接引导内核）"},
	{"the system disk is {format}", "系统盘是 {format} 格式"},
	{"disk snapshots need qcow2", "磁盘快照需要 qcow2 格式"},
	{"crash-consistent: the VM has no guest agent to freeze its file systems", "崩溃一致：该虚拟机没有可冻结其文件系统的客户机代理"},
	{"quiesced (file systems frozen through the guest agent) when the agent answers, else crash-consistent",
		"客户机代理应答时为静默快照（通过代理冻结文件系统），否则为崩溃一致"},
	{"files on virtiofs filesystems are not in it", "virtiofs 文件系统上的文件不包含在内"},
	{"the VM's data disks are not in it", "该虚拟机的数据盘不包含在内"},
	{"its data disks are copied with it", "其数据盘随之复制"},
	{"a passthrough GPU's state cannot be saved, so RAM snapshots are impossible", "直通 GPU 的状态无法保存，因此无法做内存快照"},
	{"a passthrough GPU cannot be suspended: its state cannot be saved", "直通 GPU 无法挂起：其状态无法保存"},
	{"a passthrough GPU cannot be live-migrated: its state cannot be saved", "直通 GPU 无法热迁移：其状态无法保存"},
	{"virtiofs filesystems rule out {what*}", "有 virtiofs 文件系统就无法{what}"},
	{"RAM snapshots", "做内存快照"}, {"suspend", "挂起"}, {"live migration", "热迁移"},
	{"the kind of GPU is chosen only when the VM is placed", "GPU 的种类要到虚拟机被放置时才确定"},
	{"its memory is saved with its disk (no device blocks it)", "其内存与磁盘一同保存（没有设备阻止）"},
	{"its memory can be saved to disk and the VM resumed later (no device blocks it)", "其内存可保存到磁盘，之后再恢复虚拟机（没有设备阻止）"},
	{"no device blocks it", "没有设备阻止"},
	{"its local disk is copied with it", "其本地磁盘随之复制"},
	{"the other host needs the same vGPU type and driver version", "另一台主机需要相同的 vGPU 类型和驱动版本"},
	{"the versions of libvirt and QEMU are not known ({note*})", "libvirt 和 QEMU 的版本未知（{note}）"},
	{"VFIO migration needs libvirt {l} and QEMU {q}", "VFIO 迁移需要 libvirt {l} 和 QEMU {q}"},
	{"this server did not read its host's versions", "本服务器未读取其主机的版本"},
	{"the VM is on node {n}, whose versions this server did not read", "该虚拟机在节点 {n} 上，本服务器未读取该节点的版本"},
	{"the hypervisor is libvirt's {driver*}, which reports its own version {v}, not QEMU's: VFIO migration, which needs QEMU {q}, cannot be checked",
		"虚拟化层是 libvirt 的{driver}，它报告的是自己的版本 {v} 而不是 QEMU 的：无法检查 VFIO 迁移（需要 QEMU {q}）"},
	{"test driver (test:///default)", "测试驱动（test:///default）"},
	{"libvirt {v} is older than {min}, which VFIO migration needs", "libvirt {v} 早于 VFIO 迁移所需的 {min}"},
	{"QEMU {v} is older than {min}, which VFIO migration needs", "QEMU {v} 早于 VFIO 迁移所需的 {min}"},
	{"whether the NVIDIA driver supports vGPU migration is not known ({note*})", "NVIDIA 驱动是否支持 vGPU 迁移未知（{note}）"},
	{"the NVIDIA driver does not support {kind*} migration on this GPU ({src*}) (simulated host)", "NVIDIA 驱动不支持此 GPU 上的{kind}迁移（{src}）（模拟主机）"},
	{"the NVIDIA driver does not support {kind*} migration on this GPU ({src*})", "NVIDIA 驱动不支持此 GPU 上的{kind}迁移（{src}）"},
	{"libvirt {l} and QEMU {q} support VFIO migration, and the NVIDIA driver supports {kind*} migration on this GPU ({src*}) (simulated host)",
		"libvirt {l} 和 QEMU {q} 支持 VFIO 迁移，NVIDIA 驱动也支持此 GPU 上的{kind}迁移（{src}）（模拟主机）"},
	{"libvirt {l} and QEMU {q} support VFIO migration, and the NVIDIA driver supports {kind*} migration on this GPU ({src*})",
		"libvirt {l} 和 QEMU {q} 支持 VFIO 迁移，NVIDIA 驱动也支持此 GPU 上的{kind}迁移（{src}）"},
	{"vGPU", " vGPU "}, {"MIG-backed vGPU", " MIG 支持的 vGPU "},
	{"NVIDIA's support matrix must also list the board for MIG-backed vGPUs", "MIG 支持的 vGPU 还须在 NVIDIA 的支持列表中列出该板卡"},
	{"the simulated host's NVML", "模拟主机的 NVML"},
	{"the VM holds no GPU yet", "该虚拟机尚未持有 GPU"},
	{"NVML does not list GPU {a}", "NVML 没有列出 GPU {a}"},
	{"NVML unavailable: libnvidia-ml.so.1 not found (no NVIDIA driver on this host)", "NVML 不可用：找不到 libnvidia-ml.so.1（本主机没有 NVIDIA 驱动）"},
	{"NVML disabled by configuration (--nvml none)", "NVML 已被配置禁用（--nvml none）"},
	{"NVIDIA driver: {src*} reports vGPU migration support", "NVIDIA 驱动：{src} 报告支持 vGPU 迁移"},
	{"NVIDIA driver: {src*} reports no vGPU migration support", "NVIDIA 驱动：{src} 报告不支持 vGPU 迁移"},
	{"NVIDIA driver: {note*}", "NVIDIA 驱动：{note}"},
	{"libvirt and QEMU versions not known ({note*})", "libvirt 和 QEMU 的版本未知（{note}）"},
	{"libvirt and QEMU versions not known", "libvirt 和 QEMU 的版本未知"},
	{"libvirt {l}, the test driver (test:///default) {v} (not QEMU)", "libvirt {l}，测试驱动（test:///default）{v}（不是 QEMU）"},
	// The policy's quota (pkg/policy): "quota: user ann: runs 2 of 2 VMs".
	{"quota: {detail*}", "配额：{detail}"},
	{"user {user}: {rest*}", "用户 {user}：{rest}"},
	{"group {group}: {rest*}", "组 {group}：{rest}"},
	{"may run {n} VMs at once", "同时最多只能运行 {n} 台虚拟机"},
	{"asks for {n} slices; the limit is {max} at once", "申请 {n} 个切片，而上限是同时 {max} 个"},
	{"asks for {n} whole GPUs; the limit is {max} at once", "申请 {n} 块整块 GPU，而上限是同时 {max} 块"},
	{"asks for {mem} of GPU memory; the limit is {max} at once", "申请 {mem} GPU 显存，而上限是同时 {max}"},
	{"the lease needs {h} GPU-hours in one {unit*} period; the {period*} budget is {max}", "该租期在一{unit}内需要 {h} GPU 小时，而{period}预算是 {max}"},
	{"runs {n} of {max} VMs", "已运行 {n} 台虚拟机，上限 {max} 台"},
	{"holds {n} of {max} slices", "已占用 {n} 个切片，上限 {max} 个"},
	{"holds {n} of {max} whole GPUs", "已占用 {n} 块整块 GPU，上限 {max} 块"},
	{"holds {mem} of {max} GPU memory", "已占用 {mem} GPU 显存，上限 {max}"},
	{"{period*} budget: {used} of {max} GPU-hours used or planned, this lease needs {need} more (resets {at})",
		"{period}预算：已用或已计划 {used} GPU 小时，上限 {max}，本次租期还需要 {need}（{at} 重置）"},
	{"day", "天"}, {"week", "周"}, {"month", "月"},
	{"daily", "每日"}, {"weekly", "每周"}, {"monthly", "每月"},
	// Leases and time windows (pkg/policy).
	{"a VM needs a lease longer than 0", "虚拟机的租期必须大于 0"},
	{"a lease of {lease~} is longer than the most, {max~}", "租期 {lease} 超过了上限 {max}"},
	{"no time of the week lets {class*} VMs start", "一周中没有任何时间允许{class}虚拟机启动"},
	{"window {name} lets only {classes*} start, until {at}", "时间窗口 {name} 只允许{classes}启动，直到 {at}"},
	{"a batch lease of {lease~} always runs into a window that forbids batch (the longest free stretch is {free~})",
		"{lease} 的批处理租期总会进入禁止批处理的时间窗口（最长的空闲时段是 {free}）"},
	{"the lease would run into window {name} ({at}), which forbids batch; a preemptible VM could",
		"该租期会进入禁止批处理的时间窗口 {name}（{at}）；可抢占的虚拟机可以"},
	{"batch", "批处理"}, {"interactive", "交互式"},
	// The scheduler (pkg/scheduler).
	{"preemptible VMs were told to make room; they stop at {at}", "已通知可抢占的虚拟机让出资源；它们将于 {at} 停止"},
	{"the room for {what} is booked by others then", "{what} 所需的资源在那时已被他人预约"},
	{"the room for {what} is booked by others for part of the lease", "{what} 所需的资源在租期的一部分时间里已被他人预约"},
	{"the room for {what} is held for a request ahead in the queue", "{what} 所需的资源留给了队列中更靠前的请求"},
	{"only draining GPUs have room for {what}", "只有正在排空的 GPU 能容纳 {what}"},
	{"the GPUs that could give {what} cannot be used now: {why}", "能提供 {what} 的 GPU 现在无法使用：{why}"},
	{"no GPU has room for {what} now", "现在没有 GPU 能容纳 {what}"},
	{"no GPU here can ever give {what} (boards: {boards}; check their modes and models)", "这里没有任何 GPU 能提供 {what}（GPU 型号：{boards}；请检查它们的模式和型号）"},
	{"no GPU here can ever give {what}", "这里没有任何 GPU 能提供 {what}"},
	{"{gpu} is held for someone else during that time", "{gpu} 在那段时间留给了别人"},
	// The lifecycle (pkg/orchestrator).
	{"the guest reported no address within {d~}", "客户机在 {d}内没有报告地址"},
	{"the guest is up; its desktop ({what*}) does not answer yet: cloud-init may still be setting it up",
		"客户机已启动；它的桌面（{what}）尚未响应：cloud-init 可能仍在设置它"},
	{"the guest is up but its desktop ({what*}) did not answer within {d~} of the boot: it may be failing in the guest (look with gpuvm ssh or the console)",
		"客户机已启动，但它的桌面（{what}）在启动后 {d}内没有响应：它在客户机中可能出错了（可用 gpuvm ssh 或控制台查看）"},
	// What such a desktop is (orchestrator.guestDesktop), by protocol.
	{"RDP, port {port}", "RDP，端口 {port}"},
	{"Sunshine, port {port}", "Sunshine，端口 {port}"},
	{"DCV, port {port}", "DCV，端口 {port}"},
	// The estimated start (pkg/estimate). The portal writes "uncertain"
	// before the note itself.
	{"uncertain: {why,*}; {basis*}", "{why}；{basis}"},
	{"leases may be extended", "租期可能被延长"},
	{"it counts on preemptible VMs being stopped for it", "它依赖可抢占的虚拟机为它停止"},
	{"it is more than a day ahead", "它在一天以后"},
	{"requests asked later may take the room first", "后来的请求可能先占用资源"},
	{"requests asked later may go first (the queue is in {order*} order)", "后来的请求可能先启动（队列按{order}排序）"},
	{"fifo", "先来先服务"}, {"priority", "优先级"}, {"sjf", "短作业优先"}, {"fairshare", "公平份额"},
	{"it can start at the next scheduling round", "它可以在下一轮调度时启动"},
	{"when the rules let it start", "在规则允许它启动时"},
	{"when 1 running VM's lease ends (sooner if it is deleted early)", "在 1 台运行中虚拟机的租期结束时（若它被提前删除则更早）"},
	{"when {n} running VMs' leases end (sooner if some are deleted early)", "在 {n} 台运行中虚拟机的租期结束时（若有的被提前删除则更早）"},
	{"room is held for it", "已为它保留资源"},
	{"no estimate: it does not fit even with every running VM gone ({why*})", "无法估计：即使所有运行中的虚拟机都结束，它也放不下（{why}）"},
	{"no estimate: not started by {at} ({why*})", "无法估计：到 {at} 仍未启动（{why}）"},
	{"no estimate: not started by {at}", "无法估计：到 {at} 仍未启动"},
	{"the estimated start is being computed; ask again in a moment", "预计启动时间正在计算中，请稍后再查看"},
	// Refusals of the API (pkg/server).
	{"hours: {rest*}", "小时数：{rest}"},
	{"profile {p} allows a lease of at most {max} hours; VM {vm} has {h}, so at most {room} more",
		"配置 {p} 的租期最长 {max} 小时；虚拟机 {vm} 已有 {h} 小时，所以最多还能增加 {room} 小时"},
	{"gpuvmd runs without a scheduler to book GPUs on", "gpuvmd 没有可用于预约 GPU 的调度器"},
	{"Authentication required", "需要登录"},
	{"Not allowed", "不允许"},
	{"Not found", "未找到"},
	{"The configuration has errors", "配置有错误"},
	{"Temporarily unavailable", "暂时不可用"},
	{"The request is malformed", "请求格式错误"},
	{"The request is not valid", "请求无效"},
	{"Conflict", "冲突"},
	{"The request body is too large", "请求体过大"},
	{"Internal error", "内部错误"},
	{"Method not allowed", "不允许的方法"},
	{"Refused by the sharing policy", "被共享规则拒绝"},
	// A review note (pkg/usage) that the alert summaries' patterns would
	// match too.
	{"{h} GPU-hours were held on simulated GPU servers: their utilisation is the simulator's, not a GPU's, so it is counted neither as used nor as held idle.",
		"{h} GPU 小时是在模拟 GPU 服务器上占用的：其利用率来自模拟器而非 GPU，因此既不算作已使用，也不算作闲置占用。"},
	// Alert summaries (pkg/alert): what, the metric (a name, as in
	// Prometheus), its value, the condition and for how long.
	{"{what*}: {metric} is {value*}, {cond*} for {d~}", "{what}：{metric} 为 {value}，{cond}，已持续 {d}"},
	{"{what*}: {metric} is {value*}, {cond*} within {d~}", "{what}：{metric} 为 {value}，{cond}（{d}内）"},
	{"{what*}: {metric} is {value*} again", "{what}：{metric} 已恢复为 {value}"},
	{"{what*}: {metric} is {value*}, {cond*}", "{what}：{metric} 为 {value}，{cond}"},
	{"above {v*} or below {w*}", "高于 {v} 或低于 {w}"},
	{"above {v*}", "高于 {v}"}, {"below {v*}", "低于 {v}"},
	{"down", "停止"}, {"up", "运行"}, {"unlicensed", "未授权"}, {"licensed", "已授权"},
	{"the queue", "队列"},
	{"VM {name} of {owner}", "{owner} 的虚拟机 {name}"},
	{"vGPU {type} of VM {vm} ({user}) on GPU {gpu} of {host}", "{host} 上 GPU {gpu} 的 vGPU {type}（虚拟机 {vm}，{user}）"},
	{"GPU {gpu} on {host}", "{host} 上的 GPU {gpu}"},
	{"backend {name} ({why})", "后端 {name}（{why}）"},
	{"backend {name}", "后端 {name}"},
	// The review's notes (pkg/usage).
	{"No VM held a GPU in this period.", "本期间没有虚拟机占用 GPU。"},
	{"VMs held {h} GPU-hours of the {cap} the 1 GPU offered ({pct}).", "虚拟机占用了 {h} GPU 小时，而 1 块 GPU 共提供 {cap} GPU 小时（{pct}）。"},
	{"VMs held {h} GPU-hours of the {cap} the {n} GPUs offered ({pct}).", "虚拟机占用了 {h} GPU 小时，而 {n} 块 GPU 共提供 {cap} GPU 小时（{pct}）。"},
	{"No GPU reported its utilisation for these VMs: how much of the time held was used is unknown. Is gpuvmd's sampler running?",
		"没有 GPU 报告这些虚拟机的利用率：占用的时间里有多少真正被使用，无从得知。gpuvmd 的采样器在运行吗？"},
	{"Where utilisation was measured ({m} GPU-hours), the GPUs were busy {pct} of the time: {idle} GPU-hours were held idle. For the other {rest} GPU-hours no utilisation was reported.",
		"在测得利用率的 {m} GPU 小时里，GPU 有 {pct} 的时间在忙：{idle} GPU 小时被闲置占用。其余 {rest} GPU 小时没有报告利用率。"},
	{"Where utilisation was measured ({m} GPU-hours), the GPUs were busy {pct} of the time: {idle} GPU-hours were held idle.",
		"在测得利用率的 {m} GPU 小时里，GPU 有 {pct} 的时间在忙：{idle} GPU 小时被闲置占用。"},
	{"1 VM held a GPU for an hour or more at under {pct} utilisation; it still holds it (see Idle VMs).",
		"1 台虚拟机以低于 {pct} 的利用率占用 GPU 一小时以上；它仍占着（见“闲置的虚拟机”）。"},
	{"1 VM held a GPU for an hour or more at under {pct} utilisation; it no longer holds it (see Idle VMs).",
		"1 台虚拟机以低于 {pct} 的利用率占用 GPU 一小时以上；它已不再占用（见“闲置的虚拟机”）。"},
	{"{n} VMs held a GPU for an hour or more at under {pct} utilisation; {r} of them still hold it (see Idle VMs).",
		"{n} 台虚拟机以低于 {pct} 的利用率占用 GPU 一小时以上；其中 {r} 台仍占着（见“闲置的虚拟机”）。"},
	{"{n} VMs held a GPU for an hour or more at under {pct} utilisation; 1 of them still holds it (see Idle VMs).",
		"{n} 台虚拟机以低于 {pct} 的利用率占用 GPU 一小时以上；其中 1 台仍占着（见“闲置的虚拟机”）。"},
	{"Daytime capacity idles while night requests queue: between {from} and {to} ({zone}) the GPUs were {pct} allocated, yet requests waited {night} VM-hours in the queue at night ({day} by day). Letting that work run by day (time windows, reservations) would use the idle daytime GPUs.",
		"白天的容量闲置，而夜间的请求在排队：{from} 到 {to}（{zone}）之间 GPU 的分配率为 {pct}，但请求在夜间排队等待了 {night} 虚拟机小时（白天 {day}）。让这些工作在白天运行（时间窗口、预约）就能用上白天闲置的 GPU。"},
	{"Night capacity idles while daytime requests queue: outside {from} and {to} ({zone}) the GPUs were {pct} allocated, yet requests waited {day} VM-hours in the queue by day ({night} at night). Work that can wait could be booked for the night (gpuvm create --start-at) to shorten daytime waits.",
		"夜间的容量闲置，而白天的请求在排队：{from} 到 {to}（{zone}）之外 GPU 的分配率为 {pct}，但请求在白天排队等待了 {day} 虚拟机小时（夜间 {night}）。可以等的工作可以预约到夜间（“gpuvm create --start-at”），以缩短白天的等待。"},
	{"Day and night are in balance: GPUs were {dpct} allocated between {from} and {to} ({zone}) and {npct} outside; requests waited {day} VM-hours by day and {night} at night.",
		"白天和夜间大致均衡：{from} 到 {to}（{zone}）之间 GPU 的分配率为 {dpct}，其余时间为 {npct}；请求在白天排队等待了 {day} 虚拟机小时，夜间 {night}。"},
	{"Requests: {n}; started: {s}, after waiting {mean~} on average (95% within {p95~}); still waiting: {w}; failed: {f}; deleted before they started: {g}.",
		"请求：{n} 个；已启动：{s} 个，平均等待 {mean}（95% 在 {p95}以内）；仍在等待：{w} 个；失败：{f} 个；启动前被删除：{g} 个。"},
	{"Requests: {n}; none started; still waiting: {w}; failed: {f}; deleted before they started: {g}.",
		"请求：{n} 个；没有一个启动；仍在等待：{w} 个；失败：{f} 个；启动前被删除：{g} 个。"},
}

// zhDuration writes a duration as gpuvm writes it (3h20m, 45s, 2d4h) in
// Chinese: 3 小时 20 分钟.
func zhDuration(s string) string {
	if !durationPart.MatchString(s) || durationPart.ReplaceAllString(s, "") != "" {
		return s
	}
	unit := map[string]string{"d": " 天", "h": " 小时", "m": " 分钟", "s": " 秒"}
	var parts []string
	for _, m := range durationPart.FindAllStringSubmatch(s, -1) {
		parts = append(parts, m[1]+unit[m[2]])
	}
	return strings.Join(parts, " ")
}

func init() {
	t := &table{semicolon: "；", comma: "，", dur: zhDuration}
	for _, p := range zh {
		t.patterns = append(t.patterns, compile(p[0], p[1]))
	}
	tables[Chinese] = t
}
