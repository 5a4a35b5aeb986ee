// Command terraform-provider-tfschema is a Terraform provider plugin that
// serves one provider's schema from a `terraform providers schema -json`
// file, for validating configurations offline. It is started by Terraform,
// never by hand:
//
//	TFSCHEMA_FILE      path of the schema JSON
//	TFSCHEMA_PROVIDER  provider address to serve, e.g.
//	                   registry.terraform.io/hashicorp/google
//	TFSCHEMA_DATA      "placeholder" lets data sources be read (with
//	                   placeholder values) so `terraform plan` runs offline
//
// tools/tfschema/validate.sh installs it behind a wrapper script that
// sets both variables.
package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6/tf6server"

	"github.com/jsdlq/jsdlq/tools/tfschema"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "terraform-provider-tfschema:", err)
		os.Exit(1)
	}
}

func run() error {
	file, addr := os.Getenv("TFSCHEMA_FILE"), os.Getenv("TFSCHEMA_PROVIDER")
	if file == "" || addr == "" {
		return fmt.Errorf("TFSCHEMA_FILE and TFSCHEMA_PROVIDER must both be set (got %q, %q)", file, addr)
	}
	p, err := tfschema.LoadFile(file, addr)
	if err != nil {
		return err
	}
	var opts []tfschema.Option
	switch mode := os.Getenv("TFSCHEMA_DATA"); mode {
	case "":
	case "placeholder":
		opts = append(opts, tfschema.WithPlaceholderData())
	default:
		return fmt.Errorf("TFSCHEMA_DATA=%q: the only mode is \"placeholder\"", mode)
	}
	return tf6server.Serve(addr, func() tfprotov6.ProviderServer { return tfschema.NewServer(p, opts...) })
}
