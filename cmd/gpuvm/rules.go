package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/rules"
)

type rulesOpts struct {
	lang  string
	width int
	out   outputOpts
}

func newRulesCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var r rulesOpts
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Show the rules of sharing in plain language: quotas, queue, windows, booking, leases",
		Long: `Prints the policy in force on the server in plain language, as the portal's
/rules page shows it: what applies to you, how much you may run, who goes first,
when what may start, booking ahead, how long a VM runs, idle stops and who may
use which machines. You see the rules for everyone, yours and your groups';
admins see every rule, alert rules included.

Window times are in the policy's time zone, which each says; the portal shows
them in yours.

--lang picks English (en) or Simplified Chinese (zh-CN); without it, the
language of $LC_ALL, $LC_MESSAGES or $LANG (zh_CN.UTF-8 is Chinese), else
English. The text is wrapped to --width columns (default: the terminal's width,
else $COLUMNS, else 80). --json prints the api.Rules document: every sentence
with the values it states.
` + connectionHelp + "\n" + exitHelp,
		Example: "  gpuvm rules\n  gpuvm rules --lang zh-CN\n  gpuvm rules --json",
		Args:    noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			return runRules(ctx, c, cmd, r, getenv)
		}),
	}
	o.flags(cmd, false)
	cmd.Flags().StringVar(&r.lang, "lang", "", "language: en or zh-CN (default: from $LC_ALL, $LC_MESSAGES or $LANG, else en)")
	cmd.Flags().IntVar(&r.width, "width", 0, "wrap the text to this many columns (default: the terminal's width, else $COLUMNS, else 80)")
	r.out.flags(cmd, "")
	_ = cmd.RegisterFlagCompletionFunc("lang", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return rules.Languages, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

func runRules(ctx context.Context, c *client.Client, cmd *cobra.Command, r rulesOpts, getenv func(string) string) error {
	lang := r.lang
	if lang == "" {
		lang = localeLang(getenv)
	} else if !slices.Contains(rules.Languages, lang) {
		return usageError{fmt.Errorf("--lang %q: give en or zh-CN", lang)}
	}
	if r.width < 0 || r.width > 1000 {
		return usageError{fmt.Errorf("--width %d: give a number of columns from 20 to 1000 (0: the terminal's)", r.width)}
	}
	doc, err := c.Rules(ctx, lang)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if r.out.json {
		return writeJSON(w, doc)
	}
	width := r.width
	if width == 0 {
		width = termWidth(w, getenv)
	}
	_, err = io.WriteString(w, rules.Text(*doc, width))
	return err
}

// localeLang is the language of the locale ($LC_ALL, $LC_MESSAGES, $LANG,
// the first set): Chinese for zh_* but the traditional ones, else English.
func localeLang(getenv func(string) string) string {
	for _, k := range []string{"LC_ALL", "LC_MESSAGES", "LANG"} {
		v := getenv(k)
		if v == "" {
			continue
		}
		l := strings.ToLower(v)
		if strings.HasPrefix(l, "zh") && !strings.Contains(l, "tw") && !strings.Contains(l, "hk") && !strings.Contains(l, "hant") {
			return rules.Chinese
		}
		return rules.English
	}
	return rules.English
}

// termWidth is the width of the terminal w writes to, else $COLUMNS, else
// 80.
func termWidth(w io.Writer, getenv func(string) string) int {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols >= 20 {
			return cols
		}
	}
	if n, err := strconv.Atoi(getenv("COLUMNS")); err == nil && n >= 20 {
		return n
	}
	return 80
}
