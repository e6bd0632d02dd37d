package server

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/portal"
	"github.com/gpuvm/gpuvm/pkg/rules"
)

var pRulesLang = param{Name: "lang", In: "query", Description: "en or zh-CN (default: the portal's language cookie, else Accept-Language, else en)", Type: "string"}

// rulesAPIRoutes: the rules in plain language.
var rulesAPIRoutes = []route{
	{Method: "GET", Path: "/v1/rules", Summary: "The policy in force in plain language (the portal's /rules page, gpuvm rules): quotas, queue order, time windows, booking, leases, idle stops and who may use which profile, as sections of sentences with the values they state. Users see the rules for everyone, their own and their groups'; admins see every rule, alerts included",
		Auth: authUser, Params: []param{pRulesLang}, Status: 200, Answer: api.Rules{}, Errors: []int{422, 503}},
}

// getRules writes the configuration's policy down for the caller
// (pkg/rules decides what a user sees).
func (s *Server) getRules(c *gin.Context) {
	lang := c.Query("lang")
	switch {
	case lang == "":
		lang = portal.Language(c.Request)
		c.Header("Vary", "Accept-Language, Cookie")
	case !slices.Contains(rules.Languages, lang):
		s.writeProblem(c, withField(errValidation, "lang", fmt.Sprintf("lang must be en or zh-CN, got %s", strconv.Quote(lang))))
		return
	}
	if s.Config == nil {
		s.writeProblem(c, with(errUnavailable, "gpuvmd runs without a configuration directory (--config)"))
		return
	}
	u := user(c)
	doc, err := rules.Build(s.Config.Load(), rules.Viewer{User: u.Name, Groups: u.Groups, Admin: u.Admin}, lang, s.Store.Now())
	if err != nil {
		s.writeProblem(c, fmt.Errorf("writing the rules down: %w", err))
		return
	}
	c.Header("Content-Language", lang)
	c.JSON(http.StatusOK, doc)
}
