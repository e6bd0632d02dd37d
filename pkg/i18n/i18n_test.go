package i18n

import (
	"strings"
	"testing"
)

// Each kind of sentence gpuvmd writes, in Chinese; English and unknown
// languages as they are; a sentence no pattern knows as it is.
func TestText(t *testing.T) {
	for _, c := range []struct{ en, zh string }{
		{"quota: user ann: runs 2 of 2 VMs", "配额：用户 ann：已运行 2 台虚拟机，上限 2 台"},
		{"quota: group lab: asks for 1 whole GPUs; the limit is 0 at once", "配额：组 lab：申请 1 块整块 GPU，而上限是同时 0 块"},
		{"quota: user ann: the lease needs 8.0 GPU-hours in one week period; the weekly budget is 5",
			"配额：用户 ann：该租期在一周内需要 8.0 GPU 小时，而每周预算是 5"},
		{"no GPU has room for MIG 1g.10gb now", "现在没有 GPU 能容纳 MIG 1g.10gb"},
		{"its VM desk is being resized from profile desk-1g to h100-whole", "其虚拟机 desk 正从配置文件 desk-1g 调整为 h100-whole"},
		{"putting VM desk back to its profile desk-1g failed: the sharing policy refuses it",
			"将虚拟机 desk 恢复为其配置文件 desk-1g 失败：the sharing policy refuses it"},
		{"no GPU here can ever give H100-4C (boards: L40S, H100; check their modes and models)",
			"这里没有任何 GPU 能提供 H100-4C（GPU 型号：L40S, H100；请检查它们的模式和型号）"},
		{"the guest reported no address within 5m", "客户机在 5 分钟内没有报告地址"},
		{"the task's runner stopped without reporting an exit status", "任务的运行器停止了，未报告退出状态"},
		{"its VM's node h2 is down (its heartbeat stopped)", "其虚拟机所在节点 h2 已宕机（心跳停止）"},
		{"the guest is up; its desktop (RDP, port 3389) does not answer yet: cloud-init may still be setting it up",
			"客户机已启动；它的桌面（RDP，端口 3389）尚未响应：cloud-init 可能仍在设置它"},
		{"the guest is up but its desktop (Sunshine, port 47984) did not answer within 15m of the boot: it may be failing in the guest (look with gpuvm ssh or the console)",
			"客户机已启动，但它的桌面（Sunshine，端口 47984）在启动后 15 分钟内没有响应：它在客户机中可能出错了（可用 gpuvm ssh 或控制台查看）"},
		{"a lease of 1d2h is longer than the most, 12h", "租期 1 天 2 小时 超过了上限 12 小时"},
		{"uncertain: leases may be extended, requests asked later may take the room first; when 3 running VMs' leases end (sooner if some are deleted early)",
			"租期可能被延长，后来的请求可能先占用资源；在 3 台运行中虚拟机的租期结束时（若有的被提前删除则更早）"},
		{"profile mig-small allows a lease of at most 12 hours; VM nb-0 has 4, so at most 8 more",
			"配置 mig-small 的租期最长 12 小时；虚拟机 nb-0 已有 4 小时，所以最多还能增加 8 小时"},
		{"GPU 0000:41:00.0 on gpu-01: gpu_temperature_celsius is 91 °C, above 85 °C for 5m",
			"gpu-01 上的 GPU 0000:41:00.0：gpu_temperature_celsius 为 91 °C，高于 85 °C，已持续 5 分钟"},
		{"VM nb of ann: vm_idle_seconds is 2h, above 1h for 10m", "ann 的虚拟机 nb：vm_idle_seconds 为 2 小时，高于 1 小时，已持续 10 分钟"},
		{"the queue: queue_wait_seconds is 45s again", "队列：queue_wait_seconds 已恢复为 45 秒"},
		{"VMs held 0.034 GPU-hours of the 168 the 1 GPU offered (0%).", "虚拟机占用了 0.034 GPU 小时，而 1 块 GPU 共提供 168 GPU 小时（0%）。"},
		{"Requests: 9; started: 7, after waiting 12m on average (95% within 3h20m); still waiting: 1; failed: 1; deleted before they started: 0.",
			"请求：9 个；已启动：7 个，平均等待 12 分钟（95% 在 3 小时 20 分钟以内）；仍在等待：1 个；失败：1 个；启动前被删除：0 个。"},
		{"Day and night are in balance: GPUs were 0% allocated between 08:00 and 20:00 (UTC (UTC+00:00)) and 3% outside; requests waited 0 VM-hours by day and 1.5 at night.",
			"白天和夜间大致均衡：08:00 到 20:00（UTC (UTC+00:00)）之间 GPU 的分配率为 0%，其余时间为 3%；请求在白天排队等待了 0 虚拟机小时，夜间 1.5。"},
		{"Refused by the sharing policy", "被共享规则拒绝"},
		{"2.5 GPU-hours were held on simulated GPU servers: their utilisation is the simulator's, not a GPU's, so it is counted neither as used nor as held idle.",
			"2.5 GPU 小时是在模拟 GPU 服务器上占用的：其利用率来自模拟器而非 GPU，因此既不算作已使用，也不算作闲置占用。"},
	} {
		if got := Text(Chinese, c.en); got != c.zh {
			t.Errorf("%q\n in Chinese: %q\n want       %q", c.en, got, c.zh)
		}
		if got := Text(English, c.en); got != c.en {
			t.Errorf("%q in English: %q", c.en, got)
		}
		if got := Text("fr", c.en); got != c.en {
			t.Errorf("%q in an unknown language: %q", c.en, got)
		}
	}
	for _, s := range []string{"", "something new the table does not know"} {
		if got := Text(Chinese, s); got != s {
			t.Errorf("%q in Chinese: %q, want it as it is", s, got)
		}
	}
}

// Every pattern's Chinese names the placeholders of its English, and no
// two English sentences are the same.
func TestTable(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range zh {
		if seen[p[0]] {
			t.Errorf("%q twice", p[0])
		}
		seen[p[0]] = true
		for _, m := range placeholder.FindAllStringSubmatch(p[0], -1) {
			if !strings.Contains(p[1], "{"+m[1]+"}") {
				t.Errorf("%q: its Chinese %q lacks {%s}", p[0], p[1], m[1])
			}
		}
		if strings.Contains(p[1], "*}") || strings.Contains(p[1], "~}") {
			t.Errorf("%q: its Chinese %q marks a placeholder", p[0], p[1])
		}
	}
}
