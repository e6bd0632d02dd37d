package server

import (
	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/i18n"
	"github.com/gpuvm/gpuvm/pkg/portal"
)

// say is text, a sentence gpuvmd wrote in English (a reason, a note, a
// refusal), in the request's language: the portal's language cookie, else
// Accept-Language (as GET /v1/rules), else English, which the CLI reads.
func say(c *gin.Context, text string) string {
	if text == "" {
		return ""
	}
	return i18n.Text(portal.Language(c.Request), text)
}

// sayVM says a VM's reason and estimate note in the request's language.
// Its phase is a code, which the portal says in its own words.
func sayVM(c *gin.Context, vm *api.VM) {
	vm.Reason = say(c, vm.Reason)
	vm.EstimatedStartNote = say(c, vm.EstimatedStartNote)
}
