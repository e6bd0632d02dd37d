package portal_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
)

// rulesPolicy is the policy of the rules page's test: windows in New York
// time, a group with a weekly budget, booking for that group.
const rulesPolicy = `
policy {
  timezone = "America/New_York"
  queue {
    order = "priority"
  }
  defaults {
    quota {
      vms = 0
    }
  }
  group "students" {
    preemptible = true
    quota {
      vms                = 1
      slices             = 1
      gpu_hours_per_week = 10
    }
  }
  group "staff" {
    priority = 100
  }
  window "day" {
    days        = "mon-fri"
    hours       = "09:00-18:00"
    classes     = ["interactive"]
    at_end      = "warn"
    warn_before = "15m"
  }
  reservations {
    groups     = ["students"]
    max_ahead  = "7d"
    max_length = "3h"
  }
}
`

// localWindow is how the page should write window "day" (Monday to Friday,
// 09:00 to 18:00 in New York) in Shanghai time this week: the hours of
// this week's Monday, which no daylight-saving change moves within the
// week (New York changes on Sunday nights, Shanghai never).
func localWindow(t *testing.T) (from, to string, nextDay bool) {
	t.Helper()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	n := time.Now().In(ny)
	mon := time.Date(n.Year(), n.Month(), n.Day()-(int(n.Weekday())+6)%7, 0, 0, 0, 0, ny)
	a, b := mon.Add(9*time.Hour).In(sh), mon.Add(18*time.Hour).In(sh)
	return a.Format("15:04"), b.Format("15:04"), b.Day() != a.Day()
}

// The rules page of a student, in Shanghai: real sentences of the policy
// in English and in Chinese, the window converted to the viewer's time zone
// (and said so), the policy's own times beside it, the "for you" part with
// the student's group and limits, and a heading per section; the CSP,
// origins and axe-core checks on both.
func TestRulesPageInChromium(t *testing.T) {
	needBrowser(t)
	env := clienttest.New(t, clienttest.Options{Profiles: profiles + rulesPolicy})
	if err := env.Store.SetUserGroups(context.Background(), "ann", []string{"students"}); err != nil {
		t.Fatal(err)
	}
	from, to, next := localWindow(t)
	b := newBrowser(t, env.URL, false)
	b.run(emulation.SetTimezoneOverride("Asia/Shanghai"))
	b.signIn(env.UserToken)

	type lang struct {
		code      string
		sentences []string // whole sentences of the page
		headings  []string
	}
	enWhen := fmt.Sprintf("Monday to Friday, %s to %s", from, to)
	zhWhen := fmt.Sprintf("周一至周五 %s 至 %s", from, to)
	if next {
		enWhen += " the next day"
		zhWhen = fmt.Sprintf("周一至周五 %s 至次日 %s", from, to)
	}
	for _, l := range []lang{
		{"en", []string{
			"Times are shown in your time zone, Asia/Shanghai.",
			"Members of group “students” may hold at most 1 VM and 1 slice at once, and use at most 10 GPU-hours a week.",
			"Waiting VMs start by priority, highest first; at equal priority, first come, first served.",
			"Window “day”, " + enWhen + " (your time): only interactive VMs may start; when it ends, the owners of VMs that started in it are warned 15 minutes before.",
			"In the rules' time zone (America/New_York): Monday to Friday, 09:00 to 18:00.",
			"You may book GPUs ahead for any machine.",
			"A booking starts at most 7 days ahead, lasts at most 3 hours and holds at most 1 VM; one person holds at most 2 bookings at once.",
			"Your limits come from the rule of your group “students”.",
			"1 VM at once", "10 GPU-hours a week",
		}, []string{"For you", "How much you may run", "Who goes first", "When what may start", "Booking ahead", "How long a VM runs", "Idle machines", "Who may use which machines"}},
		{"zh-CN", []string{
			"时间按你的时区 Asia/Shanghai 显示。",
			"“students”组的成员同时最多可占用 1 台虚拟机和 1 个切片，GPU 用量上限为每周 10 GPU 小时。",
			"排队的虚拟机按优先级启动，高者优先；优先级相同时先到先得。",
			"窗口“day”，你的时间" + zhWhen + "：只有交互式虚拟机可以启动；窗口结束前 15 分钟，在窗口内启动的虚拟机的所有者会收到提醒。",
			"按规则的时区（America/New_York）：周一至周五 09:00 至 18:00。",
			"你可以为任何机器提前预约 GPU。",
			"你的限额来自你所在的“students”组的规则。",
			"同时 1 台虚拟机", "每周 10 GPU 小时",
		}, []string{"与你有关", "你可以用多少", "谁先开始", "什么时候可以启动什么", "提前预约", "虚拟机能运行多久", "闲置的机器", "谁可以用哪些机器"}},
	} {
		t.Run(l.code, func(t *testing.T) {
			b.t = t
			b.eval(`document.cookie = 'gpuvm_lang=`+l.code+`; path=/; samesite=strict'; true`, nil)
			b.run(chromedp.Navigate(env.URL+"/rules"), chromedp.WaitVisible(`#rules-queue`, chromedp.ByQuery))
			var docLang string
			b.eval(`document.documentElement.lang`, &docLang)
			if docLang != l.code {
				t.Errorf("page language %q, want %q", docLang, l.code)
			}
			text := b.text("main")
			for _, s := range l.sentences {
				if !strings.Contains(text, s) {
					t.Errorf("the %s page lacks %q; it says:\n%s", l.code, s, text)
				}
			}
			var headings []string
			b.eval(`[...document.querySelectorAll('main h2')].map((h) => h.textContent)`, &headings)
			if strings.Join(headings, "|") != strings.Join(l.headings, "|") {
				t.Errorf("headings %q, want %q", headings, l.headings)
			}
			// Another group's rule is not for a student's eyes.
			if strings.Contains(text, "staff") {
				t.Errorf("a student is shown the staff group's rule:\n%s", text)
			}
			// The contents link to every section's heading.
			var broken []string
			b.eval(`[...document.querySelectorAll('nav.toc a')].map((a) => a.getAttribute('href')).filter((h) => !document.querySelector(h))`, &broken)
			if len(broken) > 0 {
				t.Errorf("contents links without a target: %v", broken)
			}
			b.check("rules-" + l.code)
			// And a picture of the windows, converted.
			b.run(chromedp.ScrollIntoView(`#rules-windows`, chromedp.ByQuery))
			b.screenshots("rules-windows-" + l.code)
		})
	}
}
