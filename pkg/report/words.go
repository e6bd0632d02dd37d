package report

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/i18n"
)

// words say the report's headings, labels and captions in a language:
// English as written here, Chinese (zh-CN) from zhWords. A sentence with
// values names them as {name}s. A sentence zhWords lacks is said in
// English: TestRenderChinese finds those.
type words struct{ lang string }

// wordsOf is the words of lang: Chinese for i18n.Chinese, else English.
func wordsOf(lang string) words {
	if lang == i18n.Chinese {
		return words{lang: i18n.Chinese}
	}
	return words{lang: i18n.English}
}

// t is en in the language, its {name}s replaced by the values of kv
// (name, value pairs).
func (w words) t(en string, kv ...any) string {
	s := en
	if w.lang == i18n.Chinese {
		if z, ok := zhWords[en]; ok {
			s = z
		}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		s = strings.ReplaceAll(s, "{"+fmt.Sprint(kv[i])+"}", fmt.Sprint(kv[i+1]))
	}
	return s
}

// code is t for a sentence whose values are typed as they are (a command,
// an API path): each is written as <code>, escaped.
func (w words) code(en string, kv ...any) template.HTML {
	s := html.EscapeString(w.t(en))
	for i := 0; i+1 < len(kv); i += 2 {
		s = strings.ReplaceAll(s, "{"+fmt.Sprint(kv[i])+"}", "<code>"+html.EscapeString(fmt.Sprint(kv[i+1]))+"</code>")
	}
	return template.HTML(s) //nolint:gosec // the sentence is ours, escaped; its values escaped
}

// note is a sentence gpuvmd wrote (a review note), in the language.
func (w words) note(s string) string { return i18n.Text(w.lang, s) }

// weekday is day d of the week, Monday 0, short.
func (w words) weekday(d int) string {
	if w.lang == i18n.Chinese {
		return [7]string{"周一", "周二", "周三", "周四", "周五", "周六", "周日"}[d]
	}
	return [7]string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}[d]
}

// wait is a wait: "40s", "12m", "3h05m", "2d4h" (Chinese: "3 小时 05 分");
// "–" when nothing started.
func (w words) wait(secs float64, started int) string {
	if started == 0 {
		return "–"
	}
	d := time.Duration(math.Round(secs)) * time.Second
	zh := w.lang == i18n.Chinese
	switch {
	case d < time.Minute && zh:
		return fmt.Sprintf("%d 秒", int(d.Seconds()))
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour && zh:
		return fmt.Sprintf("%d 分钟", int(d.Minutes()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour && zh:
		return fmt.Sprintf("%d 小时 %02d 分", int(d.Hours()), int(d.Minutes())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	case zh:
		return fmt.Sprintf("%d 天 %d 小时", int(d.Hours())/24, int(d.Hours())%24)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// zhWords are the report's sentences in Simplified Chinese, by their
// English.
var zhWords = map[string]string{
	"GPU usage report":                 "GPU 使用报告",
	"{title}: {from} to {to}":          "{title}：{from} 至 {to}",
	"From {from} to {to}.":             "从 {from} 到 {to}。",
	"From {from} to {to} on {server}.": "从 {from} 到 {to}，来自 {server}。",
	"Weekdays and hours are in {loc}.": "星期和钟点按 {loc} 计。",
	"Generated {at}.":                  "生成于 {at}。",
	"Summary":                          "概要",
	// The cards.
	"GPU-hours held":              "占用的 GPU 小时",
	"of the capacity of 1 GPU":    "占 1 块 GPU 容量的比例",
	"of the capacity of {n} GPUs": "占 {n} 块 GPU 容量的比例",
	"utilisation where measured":  "测得的利用率",
	"GPU-hours held idle":         "闲置占用的 GPU 小时",
	"idle VM":                     "闲置的虚拟机",
	"idle VMs":                    "闲置的虚拟机",
	"95th percentile queue wait":  "排队等待的 95 百分位",
	"GPU-hours on simulated GPU servers (utilisation not measured)": "模拟 GPU 服务器上的 GPU 小时（未测量利用率）",
	// The sections.
	"What stands out":       "值得注意的情况",
	"Nothing to note.":      "没有需要注意的。",
	"GPU-hours per user":    "每个用户的 GPU 小时",
	"GPU-hours per group":   "每个组的 GPU 小时",
	"GPU-hours per profile": "每个配置的 GPU 小时",
	"GPU time held, each VM charged the share of the GPU it held (a MIG 1g slice of seven: 1/7; a whole GPU: 1); used is the part the GPU was busy, where it reported its utilisation.": "占用的 GPU 时间，每台虚拟机按它占用的 GPU 份额计（七分之一的 MIG 1g 切片：1/7；整块 GPU：1）；使用是 GPU 忙碌的部分（在 GPU 报告了利用率的地方）。",
	"GPU time held on a simulated GPU server is shown as simulated: the simulator's utilisation is not a GPU's, so it is counted neither as used nor as idle.":                          "在模拟 GPU 服务器上占用的 GPU 时间标为模拟：模拟器的利用率不是 GPU 的，因此既不算作使用，也不算作闲置。",
	"held":                             "占用",
	"used":                             "使用",
	"User":                             "用户",
	"Group":                            "组",
	"Profile":                          "配置",
	"GPU-hours":                        "GPU 小时",
	"Measured":                         "已测量",
	"Used":                             "已使用",
	"Idle":                             "闲置",
	"Simulated":                        "模拟",
	"simulated":                        "模拟",
	"Utilisation":                      "利用率",
	"VMs":                              "虚拟机",
	"Still held":                       "仍占用",
	"Total":                            "合计",
	"No VM held a GPU in this period.": "本期间没有虚拟机占用 GPU。",
	"Idle VMs":                         "闲置的虚拟机",
	"VMs that held a GPU for an hour or more at under {pct} utilisation: their GPUs could have served others.": "以低于 {pct} 的利用率占用 GPU 一小时以上的虚拟机：它们的 GPU 本可以服务他人。",
	"VM":                  "虚拟机",
	"State":               "状态",
	"Idle GPU-hours":      "闲置 GPU 小时",
	"still holds its GPU": "仍占着 GPU",
	"ended":               "已结束",
	"No idle VMs.":        "没有闲置的虚拟机。",
	"Queue waits":         "排队等待",
	"How long the VMs asked for in this period waited for a GPU: from the request (or its booked start) until the VM first ran.": "本期间申请的虚拟机等待 GPU 的时长：从申请（或预约的开始时间）到虚拟机首次运行。",
	"Requests":                    "请求",
	"Started":                     "已启动",
	"Still waiting":               "仍在等待",
	"Failed":                      "失败",
	"Deleted before starting":     "启动前被删除",
	"Mean wait":                   "平均等待",
	"95th percentile":             "95 百分位",
	"Longest":                     "最长",
	"All profiles":                "所有配置",
	"No requests in this period.": "本期间没有请求。",
	"When GPUs are wanted":        "什么时候需要 GPU",
	"Weekday × hour of day in {loc}, averaged over the period. Hover over a cell for its value.": "星期 × 钟点（{loc}），为本期间的平均值。将指针悬停在格子上可看其数值。",
	"No GPU reported its utilisation in this period.":                                            "本期间没有 GPU 报告其利用率。",
	"Made by {cmd} from {api}. This file has no scripts and loads nothing: it reads offline.":    "由 {cmd} 根据 {api} 生成。此文件不含脚本，也不加载任何内容：离线即可阅读。",
	// The charts.
	"GPU-hours per user, held and used":         "每个用户的 GPU 小时，占用与使用",
	"GPU-hours per group, held and used":        "每个组的 GPU 小时，占用与使用",
	"GPU-hours per profile, held and used":      "每个配置的 GPU 小时，占用与使用",
	"{key}: {h} GPU-hours held":                 "{key}：占用 {h} GPU 小时",
	"{h} h":                                     "{h} 小时",
	" · {pct} used":                             " · 使用 {pct}",
	", {used} used ({pct} of the {m} measured)": "，使用 {used}（测得的 {m} 中的 {pct}）",
	" · use unknown":                            " · 使用情况未知",
	" · simulated":                              " · 模拟",
	", {sim} on a simulated GPU server":         "，其中 {sim} 在模拟 GPU 服务器上",
	"mean {mean} · p95 {p95}":                   "平均 {mean} · 95% {p95}",
	"{profile}: {n} started, mean wait {mean}, 95% within {p95}":             "{profile}：{n} 台已启动，平均等待 {mean}，95% 在 {p95} 以内",
	"Queue wait per profile: mean (dark) and 95th percentile (light), hours": "每个配置的排队等待：平均（深色）和 95 百分位（浅色），小时",
	"hours":     "小时",
	"GPUs held": "占用的 GPU",
	"Mean number of GPUs held by VMs, of {n} (slices count as their share).": "虚拟机占用的 GPU 平均数量，共 {n} 块（切片按其份额计）。",
	"Mean GPUs held by weekday and hour":                                     "按星期和钟点的平均占用 GPU 数",
	"Requests waiting":                                                       "等待中的请求",
	"Mean number of VMs waiting in the queue for a GPU.":                     "在队列中等待 GPU 的虚拟机平均数量。",
	"Mean VMs waiting by weekday and hour":                                   "按星期和钟点的平均等待虚拟机数",
	"Mean utilisation of the GPUs held, where they reported it.":             "占用的 GPU 的平均利用率（在它们报告了利用率的地方）。",
	"Mean GPU utilisation by weekday and hour":                               "按星期和钟点的平均 GPU 利用率",
	"no data": "无数据",
}
