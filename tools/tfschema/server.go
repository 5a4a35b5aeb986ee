package tfschema

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// Server implements tfprotov6.ProviderServer for one Provider. Terraform
// core checks a configuration against the schema (unknown arguments,
// missing required arguments, block nesting and counts, types) before it
// calls the provider. The one schema rule core leaves to providers — a
// computed-only attribute must not be set — is checked here, as the real
// providers do; beyond the schema nothing is checked, because this
// stand-in cannot know a provider's own validation logic.
type Server struct {
	p                *Provider
	placeholderReads bool
}

var _ tfprotov6.ProviderServer = (*Server)(nil)

// Option configures a Server.
type Option func(*Server)

// WithPlaceholderData makes data sources readable: a read returns the
// configuration with every unset computed top-level attribute filled with
// an obvious placeholder ("tfschema-placeholder", 0, false, empty
// collections). That lets `terraform plan` run offline to check what
// validate cannot (for_each keys known at plan time, preconditions,
// ephemeral values, variable files); the placeholders are never real data.
func WithPlaceholderData() Option { return func(s *Server) { s.placeholderReads = true } }

// NewServer returns a provider server for p.
func NewServer(p *Provider, opts ...Option) *Server {
	s := &Server{p: p}
	for _, o := range opts {
		o(s)
	}
	return s
}

func errDiag(summary, detail string) []*tfprotov6.Diagnostic {
	return []*tfprotov6.Diagnostic{{Severity: tfprotov6.DiagnosticSeverityError, Summary: summary, Detail: detail}}
}

func (s *Server) notSupported(op, typeName string) []*tfprotov6.Diagnostic {
	return errDiag(
		fmt.Sprintf("tfschema: %s is not supported", op),
		fmt.Sprintf("%s (%s) is an offline schema stand-in for %s: it validates configurations and cannot create, read or import real infrastructure. Use the real provider for plan/apply.", op, typeName, s.p.Address),
	)
}

func (s *Server) resourceSchema(typeName string) (*tfprotov6.Schema, []*tfprotov6.Diagnostic) {
	if sc, ok := s.p.Resources[typeName]; ok {
		return sc, nil
	}
	return nil, errDiag("tfschema: unknown resource type", fmt.Sprintf("%q is not in the schema of %s", typeName, s.p.Address))
}

// GetMetadata lists everything the schema holds.
func (s *Server) GetMetadata(context.Context, *tfprotov6.GetMetadataRequest) (*tfprotov6.GetMetadataResponse, error) {
	resp := &tfprotov6.GetMetadataResponse{ServerCapabilities: &tfprotov6.ServerCapabilities{GetProviderSchemaOptional: true}}
	for _, n := range slices.Sorted(maps.Keys(s.p.Resources)) {
		resp.Resources = append(resp.Resources, tfprotov6.ResourceMetadata{TypeName: n})
	}
	for _, n := range slices.Sorted(maps.Keys(s.p.DataSources)) {
		resp.DataSources = append(resp.DataSources, tfprotov6.DataSourceMetadata{TypeName: n})
	}
	for _, n := range slices.Sorted(maps.Keys(s.p.EphemeralResources)) {
		resp.EphemeralResources = append(resp.EphemeralResources, tfprotov6.EphemeralResourceMetadata{TypeName: n})
	}
	for _, n := range slices.Sorted(maps.Keys(s.p.Functions)) {
		resp.Functions = append(resp.Functions, tfprotov6.FunctionMetadata{Name: n})
	}
	return resp, nil
}

// GetProviderSchema returns the converted schema.
func (s *Server) GetProviderSchema(context.Context, *tfprotov6.GetProviderSchemaRequest) (*tfprotov6.GetProviderSchemaResponse, error) {
	return &tfprotov6.GetProviderSchemaResponse{
		ServerCapabilities:       &tfprotov6.ServerCapabilities{GetProviderSchemaOptional: true},
		Provider:                 s.p.Schema,
		ResourceSchemas:          s.p.Resources,
		DataSourceSchemas:        s.p.DataSources,
		EphemeralResourceSchemas: s.p.EphemeralResources,
		Functions:                s.p.Functions,
	}, nil
}

// GetResourceIdentitySchemas: `providers schema -json` carries no identity
// schemas, so there are none to serve.
func (s *Server) GetResourceIdentitySchemas(context.Context, *tfprotov6.GetResourceIdentitySchemasRequest) (*tfprotov6.GetResourceIdentitySchemasResponse, error) {
	return &tfprotov6.GetResourceIdentitySchemasResponse{IdentitySchemas: map[string]*tfprotov6.ResourceIdentitySchema{}}, nil
}

// ValidateProviderConfig accepts what the schema allows.
func (s *Server) ValidateProviderConfig(_ context.Context, req *tfprotov6.ValidateProviderConfigRequest) (*tfprotov6.ValidateProviderConfigResponse, error) {
	diags, err := computedOnlySet(s.p.Schema, req.Config)
	return &tfprotov6.ValidateProviderConfigResponse{PreparedConfig: req.Config, Diagnostics: diags}, err
}

// ConfigureProvider has nothing to connect to.
func (s *Server) ConfigureProvider(context.Context, *tfprotov6.ConfigureProviderRequest) (*tfprotov6.ConfigureProviderResponse, error) {
	return &tfprotov6.ConfigureProviderResponse{}, nil
}

// StopProvider has nothing in flight to stop.
func (s *Server) StopProvider(context.Context, *tfprotov6.StopProviderRequest) (*tfprotov6.StopProviderResponse, error) {
	return &tfprotov6.StopProviderResponse{}, nil
}

// ValidateResourceConfig accepts what the schema allows.
func (s *Server) ValidateResourceConfig(_ context.Context, req *tfprotov6.ValidateResourceConfigRequest) (*tfprotov6.ValidateResourceConfigResponse, error) {
	diags, err := computedOnlySet(s.p.Resources[req.TypeName], req.Config)
	return &tfprotov6.ValidateResourceConfigResponse{Diagnostics: diags}, err
}

// UpgradeResourceState re-reads stored state under the current schema,
// dropping attributes the schema no longer has.
func (s *Server) UpgradeResourceState(_ context.Context, req *tfprotov6.UpgradeResourceStateRequest) (*tfprotov6.UpgradeResourceStateResponse, error) {
	sc, diags := s.resourceSchema(req.TypeName)
	if diags != nil {
		return &tfprotov6.UpgradeResourceStateResponse{Diagnostics: diags}, nil
	}
	typ := sc.ValueType()
	if req.RawState == nil || (len(req.RawState.JSON) == 0 && len(req.RawState.Flatmap) == 0) {
		dv, err := tfprotov6.NewDynamicValue(typ, tftypes.NewValue(typ, nil))
		if err != nil {
			return nil, fmt.Errorf("tfschema: encode null state: %w", err)
		}
		return &tfprotov6.UpgradeResourceStateResponse{UpgradedState: &dv}, nil
	}
	val, err := req.RawState.UnmarshalWithOpts(typ, tfprotov6.UnmarshalOpts{
		ValueFromJSONOpts: tftypes.ValueFromJSONOpts{IgnoreUndefinedAttributes: true},
	})
	if err != nil {
		return &tfprotov6.UpgradeResourceStateResponse{Diagnostics: errDiag("tfschema: cannot read stored state", err.Error())}, nil
	}
	dv, err := tfprotov6.NewDynamicValue(typ, val)
	if err != nil {
		return nil, fmt.Errorf("tfschema: encode upgraded state: %w", err)
	}
	return &tfprotov6.UpgradeResourceStateResponse{UpgradedState: &dv}, nil
}

// UpgradeResourceIdentity: there are no identity schemas.
func (s *Server) UpgradeResourceIdentity(_ context.Context, req *tfprotov6.UpgradeResourceIdentityRequest) (*tfprotov6.UpgradeResourceIdentityResponse, error) {
	return &tfprotov6.UpgradeResourceIdentityResponse{Diagnostics: s.notSupported("resource identity", req.TypeName)}, nil
}

// ReadResource reports the stored state unchanged: there is no remote
// object to compare with.
func (s *Server) ReadResource(_ context.Context, req *tfprotov6.ReadResourceRequest) (*tfprotov6.ReadResourceResponse, error) {
	return &tfprotov6.ReadResourceResponse{NewState: req.CurrentState, Private: req.Private}, nil
}

// PlanResourceChange echoes the proposed state; on create, computed
// attributes the configuration leaves null become unknown (known after
// apply), as a real provider would plan them. Write-only attributes are
// never planned.
func (s *Server) PlanResourceChange(_ context.Context, req *tfprotov6.PlanResourceChangeRequest) (*tfprotov6.PlanResourceChangeResponse, error) {
	sc, diags := s.resourceSchema(req.TypeName)
	if diags != nil {
		return &tfprotov6.PlanResourceChangeResponse{Diagnostics: diags}, nil
	}
	typ := sc.ValueType()
	proposed, err := req.ProposedNewState.Unmarshal(typ)
	if err != nil {
		return nil, fmt.Errorf("tfschema: decode proposed state: %w", err)
	}
	if proposed.IsNull() { // destroy
		return &tfprotov6.PlanResourceChangeResponse{PlannedState: req.ProposedNewState, PlannedPrivate: req.PriorPrivate}, nil
	}
	create := true
	if req.PriorState != nil {
		prior, err := req.PriorState.Unmarshal(typ)
		if err != nil {
			return nil, fmt.Errorf("tfschema: decode prior state: %w", err)
		}
		create = prior.IsNull()
	}
	planned, err := PlanValue(sc.Block, proposed, create)
	if err != nil {
		return nil, err
	}
	dv, err := tfprotov6.NewDynamicValue(typ, planned)
	if err != nil {
		return nil, fmt.Errorf("tfschema: encode planned state: %w", err)
	}
	return &tfprotov6.PlanResourceChangeResponse{PlannedState: &dv, PlannedPrivate: req.PriorPrivate}, nil
}

// ApplyResourceChange refuses: nothing can be created offline.
func (s *Server) ApplyResourceChange(_ context.Context, req *tfprotov6.ApplyResourceChangeRequest) (*tfprotov6.ApplyResourceChangeResponse, error) {
	return &tfprotov6.ApplyResourceChangeResponse{Diagnostics: s.notSupported("apply", req.TypeName)}, nil
}

// ImportResourceState refuses: there is nothing to import from.
func (s *Server) ImportResourceState(_ context.Context, req *tfprotov6.ImportResourceStateRequest) (*tfprotov6.ImportResourceStateResponse, error) {
	return &tfprotov6.ImportResourceStateResponse{Diagnostics: s.notSupported("import", req.TypeName)}, nil
}

// MoveResourceState refuses: cross-type moves need provider logic.
func (s *Server) MoveResourceState(_ context.Context, req *tfprotov6.MoveResourceStateRequest) (*tfprotov6.MoveResourceStateResponse, error) {
	return &tfprotov6.MoveResourceStateResponse{Diagnostics: s.notSupported("moved between resource types", req.TargetTypeName)}, nil
}

// GenerateResourceConfig refuses: config generation follows an import.
func (s *Server) GenerateResourceConfig(_ context.Context, req *tfprotov6.GenerateResourceConfigRequest) (*tfprotov6.GenerateResourceConfigResponse, error) {
	return &tfprotov6.GenerateResourceConfigResponse{Diagnostics: s.notSupported("config generation", req.TypeName)}, nil
}

// ValidateDataResourceConfig accepts what the schema allows.
func (s *Server) ValidateDataResourceConfig(_ context.Context, req *tfprotov6.ValidateDataResourceConfigRequest) (*tfprotov6.ValidateDataResourceConfigResponse, error) {
	diags, err := computedOnlySet(s.p.DataSources[req.TypeName], req.Config)
	return &tfprotov6.ValidateDataResourceConfigResponse{Diagnostics: diags}, err
}

// ReadDataSource refuses, since the answer would have to come from the
// cloud, unless the server was built WithPlaceholderData.
func (s *Server) ReadDataSource(_ context.Context, req *tfprotov6.ReadDataSourceRequest) (*tfprotov6.ReadDataSourceResponse, error) {
	if !s.placeholderReads {
		return &tfprotov6.ReadDataSourceResponse{Diagnostics: s.notSupported("reading a data source", req.TypeName)}, nil
	}
	sc, ok := s.p.DataSources[req.TypeName]
	if !ok {
		return &tfprotov6.ReadDataSourceResponse{Diagnostics: errDiag("tfschema: unknown data source", fmt.Sprintf("%q is not in the schema of %s", req.TypeName, s.p.Address))}, nil
	}
	typ := sc.ValueType()
	config, err := req.Config.Unmarshal(typ)
	if err != nil {
		return nil, fmt.Errorf("tfschema: decode data source config: %w", err)
	}
	state, err := PlaceholderValue(sc.Block, config)
	if err != nil {
		return nil, err
	}
	dv, err := tfprotov6.NewDynamicValue(typ, state)
	if err != nil {
		return nil, fmt.Errorf("tfschema: encode data source state: %w", err)
	}
	return &tfprotov6.ReadDataSourceResponse{State: &dv}, nil
}

// ValidateEphemeralResourceConfig accepts what the schema allows.
func (s *Server) ValidateEphemeralResourceConfig(_ context.Context, req *tfprotov6.ValidateEphemeralResourceConfigRequest) (*tfprotov6.ValidateEphemeralResourceConfigResponse, error) {
	diags, err := computedOnlySet(s.p.EphemeralResources[req.TypeName], req.Config)
	return &tfprotov6.ValidateEphemeralResourceConfigResponse{Diagnostics: diags}, err
}

// OpenEphemeralResource refuses, like ReadDataSource.
func (s *Server) OpenEphemeralResource(_ context.Context, req *tfprotov6.OpenEphemeralResourceRequest) (*tfprotov6.OpenEphemeralResourceResponse, error) {
	return &tfprotov6.OpenEphemeralResourceResponse{Diagnostics: s.notSupported("opening an ephemeral resource", req.TypeName)}, nil
}

// RenewEphemeralResource: nothing was opened.
func (s *Server) RenewEphemeralResource(_ context.Context, req *tfprotov6.RenewEphemeralResourceRequest) (*tfprotov6.RenewEphemeralResourceResponse, error) {
	return &tfprotov6.RenewEphemeralResourceResponse{Diagnostics: s.notSupported("renewing an ephemeral resource", req.TypeName)}, nil
}

// CloseEphemeralResource: nothing was opened, so closing is trivially done.
func (s *Server) CloseEphemeralResource(context.Context, *tfprotov6.CloseEphemeralResourceRequest) (*tfprotov6.CloseEphemeralResourceResponse, error) {
	return &tfprotov6.CloseEphemeralResourceResponse{}, nil
}

// GetFunctions returns the schema's functions.
func (s *Server) GetFunctions(context.Context, *tfprotov6.GetFunctionsRequest) (*tfprotov6.GetFunctionsResponse, error) {
	return &tfprotov6.GetFunctionsResponse{Functions: s.p.Functions}, nil
}

// CallFunction evaluates the functions it can emulate exactly (see
// callFunction) and reports a function error for the rest.
func (s *Server) CallFunction(_ context.Context, req *tfprotov6.CallFunctionRequest) (*tfprotov6.CallFunctionResponse, error) {
	fn, ok := s.p.Functions[req.Name]
	if !ok {
		return &tfprotov6.CallFunctionResponse{Error: &tfprotov6.FunctionError{Text: fmt.Sprintf("tfschema: no function %q in %s (have %v)", req.Name, s.p.Address, slices.Sorted(maps.Keys(s.p.Functions)))}}, nil
	}
	args := make([]tftypes.Value, 0, len(req.Arguments))
	for i, a := range req.Arguments {
		typ := tftypes.Type(tftypes.DynamicPseudoType)
		if i < len(fn.Parameters) {
			typ = fn.Parameters[i].Type
		} else if fn.VariadicParameter != nil {
			typ = tftypes.List{ElementType: fn.VariadicParameter.Type}
		}
		v, err := a.Unmarshal(typ)
		if err != nil {
			return nil, fmt.Errorf("tfschema: decode argument %d of %s: %w", i, req.Name, err)
		}
		args = append(args, v)
	}
	result, ferr := callFunction(req.Name, fn, args)
	if ferr != nil {
		return &tfprotov6.CallFunctionResponse{Error: ferr}, nil
	}
	dv, err := tfprotov6.NewDynamicValue(fn.Return.Type, result)
	if err != nil {
		return nil, fmt.Errorf("tfschema: encode result of %s: %w", req.Name, err)
	}
	return &tfprotov6.CallFunctionResponse{Result: &dv}, nil
}
