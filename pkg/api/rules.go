package api

import "time"

// Rules is the policy in force written in plain language (GET /v1/rules,
// gpuvm rules, the portal's /rules page; pkg/rules builds it): sections of
// sentences made from the policy's real values, with those values kept
// structured beside the words, so that a page can convert window times to
// its viewer's time zone and show quotas with its own units.
type Rules struct {
	// Lang is the language of every sentence: "en" or "zh-CN".
	Lang string `json:"lang"`
	// Scope is RulesScopeAll (an admin: every rule) or RulesScopeUser
	// (the rules for everyone, the caller's own user rule and the rules of
	// their groups; other users' and groups' rules, alerts and webhooks are
	// left out).
	Scope string `json:"scope"`
	// Timezone is the policy's IANA time zone: windows and the calendar
	// days, weeks and months of GPU-hour budgets are in it ("UTC" when the
	// policy names none).
	Timezone    string    `json:"timezone"`
	GeneratedAt time.Time `json:"generated_at"`
	// You is what applies to the caller.
	You RulesViewer `json:"you"`
	// Sections in reading order; RulesSection.ID names each.
	Sections []RulesSection `json:"sections"`
}

// Scopes of a Rules document.
const (
	RulesScopeAll  = "all"
	RulesScopeUser = "user"
)

// Where a user's limits come from (RulesViewer.LimitsFrom).
const (
	LimitsFromUser     = "user"     // their own user block
	LimitsFromGroups   = "groups"   // the most generous of their groups' blocks
	LimitsFromDefaults = "defaults" // the defaults block
)

// RulesViewer is what the policy gives the caller.
type RulesViewer struct {
	User   string   `json:"user"`
	Admin  bool     `json:"admin"`
	Groups []string `json:"groups"`
	// LimitsFrom is LimitsFromUser, LimitsFromGroups or
	// LimitsFromDefaults; LimitGroups are the groups whose blocks made the
	// limits (LimitsFromGroups only).
	LimitsFrom  string   `json:"limits_from"`
	LimitGroups []string `json:"limit_groups,omitempty"`
	Priority    int      `json:"priority"`
	Preemptible bool     `json:"preemptible"`
	// Quota is every limit the caller has (fields quota.vms, …); empty:
	// no limit.
	Quota []RulesFact `json:"quota"`
	// Profiles are the profiles the caller may use.
	Profiles []string `json:"profiles"`
	// MayBook says whether the caller may book capacity ahead (an admin
	// always may, whatever the policy says).
	MayBook bool `json:"may_book"`
}

// RulesSection is one heading of the rules and its sentences.
type RulesSection struct {
	// ID is one of you, quotas, queue, windows, reservations, leases,
	// idle, profiles, alerts.
	ID        string          `json:"id"`
	Title     string          `json:"title"`
	Sentences []RulesSentence `json:"sentences"`
}

// RulesSentence is one rule in words, with the policy values it states.
type RulesSentence struct {
	Text string `json:"text"`
	// Subject is whom or what the sentence is about: "defaults",
	// "group:NAME", "user:NAME", "profile:NAME", "window:NAME",
	// "alert:NAME"; "" for everyone.
	Subject string `json:"subject,omitempty"`
	// Facts are the policy values the sentence states.
	Facts []RulesFact `json:"facts,omitempty"`
	// Window is set on the sentence of a time window: its times, for a
	// page to show in its viewer's time zone.
	Window *RulesWindow `json:"window,omitempty"`
}

// Units of RulesFact.Number.
const (
	UnitCount    = "count"
	UnitBytes    = "bytes"
	UnitSeconds  = "seconds"
	UnitGPUHours = "gpu_hours"
	UnitPercent  = "percent"
	UnitPriority = "priority" // 0–1000, higher first
)

// RulesFact is one policy value: a number with its unit, a text or a list.
type RulesFact struct {
	// Field is the attribute's place in the configuration, as in the
	// configuration's JSON: "groups.quota.gpu_hours_per_week",
	// "windows.at_end", "profile.lease.max", "timezone".
	Field  string   `json:"field"`
	Number *float64 `json:"number,omitempty"`
	Unit   string   `json:"unit,omitempty"`
	Text   string   `json:"text,omitempty"`
	List   []string `json:"list,omitempty"`
}

// RulesWindow is a weekly time window's times.
type RulesWindow struct {
	Name string `json:"name"`
	// Zone is the IANA time zone the window's times are in.
	Zone string `json:"zone"`
	// When is the window's times in words, in Zone ("Mon–Fri
	// 09:00–18:00"); Rule what it lets start and does at its end, in words,
	// without the times: a page writes its own When in its viewer's zone
	// and adds Rule.
	When string `json:"when"`
	Rule string `json:"rule"`
	// Spans are the stretches of the week it covers, in Zone.
	Spans []RulesSpan `json:"spans"`
	// ThisWeek are its occurrences that start in the current week (Monday
	// 00:00 to Monday 00:00 in Zone), as absolute times; a window open all
	// week has the week itself.
	ThisWeek []RulesOccurrence `json:"this_week"`
}

// RulesSpan is a stretch of the week: from a weekday ("mon") and a time of
// day ("09:00") to another, in the window's zone.
type RulesSpan struct {
	StartDay string `json:"start_day"`
	Start    string `json:"start"`
	EndDay   string `json:"end_day"`
	End      string `json:"end"`
}

// RulesOccurrence is one occurrence of a window.
type RulesOccurrence struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}
