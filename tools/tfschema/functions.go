package tfschema

import (
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// idSegments maps the google provider's "<x>_from_id" functions to the path
// segment whose value they return ("projects/P/locations/L/..." → L).
var idSegments = map[string]string{
	"project_from_id":  "projects",
	"location_from_id": "locations",
	"region_from_id":   "regions",
	"zone_from_id":     "zones",
}

// callFunction emulates the provider functions whose result follows from
// their documented contract alone (string parsing of resource ids). Any
// other function gets a clear error rather than an invented result.
func callFunction(name string, fn *tfprotov6.Function, args []tftypes.Value) (tftypes.Value, *tfprotov6.FunctionError) {
	arg0 := func() (string, *tfprotov6.FunctionError) {
		if len(args) != 1 || !args[0].Type().Is(tftypes.String) {
			return "", &tfprotov6.FunctionError{Text: fmt.Sprintf("%s takes one string argument", name)}
		}
		var s string
		if err := args[0].As(&s); err != nil {
			return "", &tfprotov6.FunctionError{Text: err.Error(), FunctionArgument: new(int64)}
		}
		return s, nil
	}
	str := func(s string) tftypes.Value { return tftypes.NewValue(tftypes.String, s) }

	if seg, ok := idSegments[name]; ok {
		id, ferr := arg0()
		if ferr != nil {
			return tftypes.Value{}, ferr
		}
		parts := strings.Split(strings.Trim(id, "/"), "/")
		for i := 0; i+1 < len(parts); i++ {
			if parts[i] == seg && parts[i+1] != "" {
				return str(parts[i+1]), nil
			}
		}
		return tftypes.Value{}, &tfprotov6.FunctionError{Text: fmt.Sprintf("%s: no %q segment in %q", name, seg+"/", id), FunctionArgument: new(int64)}
	}
	switch name {
	case "name_from_id":
		id, ferr := arg0()
		if ferr != nil {
			return tftypes.Value{}, ferr
		}
		parts := strings.Split(strings.Trim(id, "/"), "/")
		if len(parts) < 2 {
			return tftypes.Value{}, &tfprotov6.FunctionError{Text: fmt.Sprintf("name_from_id: %q has no collection/name pair", id), FunctionArgument: new(int64)}
		}
		return str(parts[len(parts)-1]), nil
	case "region_from_zone":
		zone, ferr := arg0()
		if ferr != nil {
			return tftypes.Value{}, ferr
		}
		i := strings.LastIndex(zone, "-")
		if i <= 0 {
			return tftypes.Value{}, &tfprotov6.FunctionError{Text: fmt.Sprintf("region_from_zone: %q is not a zone name", zone), FunctionArgument: new(int64)}
		}
		return str(zone[:i]), nil
	}
	return tftypes.Value{}, &tfprotov6.FunctionError{Text: fmt.Sprintf("tfschema: function %s (returning %s) is in the schema but not emulated offline", name, fn.Return.Type)}
}
