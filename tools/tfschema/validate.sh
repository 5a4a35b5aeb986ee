#!/usr/bin/env bash
# Validates terraform/ (root module and every module): terraform fmt -check,
# init and validate. The providers come from the file that `terraform providers
# schema -json` prints (terraform/README.md says how to make it): where
# TF_PROVIDERS_SCHEMA points, else shared/terraform/providers-schema.json
# beside the checkout (one file for every checkout, read where it lies; no
# copy of it belongs in the repository). It is served by tools/tfschema
# (internal/testenv.ProvidersSchema looks in the same places), so no
# Terraform registry is needed. Without that file the script says so and
# uses the real providers from the registry instead.
#
# Nothing is written into the repo: provider plugins, TF_DATA_DIR and the CLI
# config live in a temp dir, and lock files init creates are removed again.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tfroot=$repo/terraform
schema=${TF_PROVIDERS_SCHEMA:-$(dirname "$repo")/shared/terraform/providers-schema.json}
# provider address -> version the lock would pin (must satisfy versions.tf)
providers=(
	"registry.terraform.io/hashicorp/google 7.45.0"
	"registry.terraform.io/hashicorp/archive 2.8.0"
)

start=$(date +%s)
step() { printf '==> [%3ds] %s\n' "$(($(date +%s) - start))" "$*"; }
die() { printf 'tf-validate: FAIL: %s\n' "$*" >&2; exit 1; }

command -v terraform >/dev/null || die "terraform is not on PATH"
command -v go >/dev/null || die "go is not on PATH"
[ -d "$tfroot" ] || die "no terraform/ directory at $tfroot"

work=$(mktemp -d "${TMPDIR:-/tmp}/tf-validate.XXXXXX")
created_locks=()
cleanup() {
	for f in "${created_locks[@]}"; do rm -f "$f"; done
	rm -rf "$work"
}
trap cleanup EXIT

# Module directories: every directory under terraform/ holding .tf files.
mapfile -t dirs < <(find "$tfroot" -name .terraform -prune -o -name '*.tf' -printf '%h\n' | sort -u)
[ "${#dirs[@]}" -gt 0 ] || die "no .tf files under $tfroot"

# The function bundle leaves these directories out (function_source_excludes
# in terraform/variables.tf); a deploy root importing from them would only
# fail in Cloud Build, so catch it here.
if compgen -G "$repo/*.go" >/dev/null; then
	step "deploy root: no imports from directories left out of the function bundle"
	deps=$(cd "$repo" && go list -deps -f '{{.ImportPath}}' .) || die "go list of the deploy root failed"
	module=$(cd "$repo" && go list -m)
	bad=$(grep -E "^$module/(emulator|tools|examples|internal|cmd|terraform|docs)(/|$)" <<<"$deps" || true)
	[ -z "$bad" ] || die "the deploy root imports packages excluded from the function bundle: $bad"
fi

export TF_IN_AUTOMATION=1 TF_INPUT=0
unset TF_PLUGIN_CACHE_DIR
# A CLI config named by the environment but missing only produces warnings;
# use an empty one instead (the offline branch below writes its own).
if [ -z "${TF_CLI_CONFIG_FILE:-}" ] || [ ! -f "$TF_CLI_CONFIG_FILE" ]; then
	: >"$work/empty.tfrc"
	export TF_CLI_CONFIG_FILE="$work/empty.tfrc"
fi

step "terraform $(terraform version | head -n1 | cut -d' ' -f2): fmt -check -recursive terraform/"
terraform fmt -check -recursive -diff "$tfroot" || die "terraform fmt: run 'terraform fmt -recursive terraform/'"
if [ -f "$schema" ]; then
	step "offline providers from $schema"
	platform="$(go env GOOS)_$(go env GOARCH)"
	step "building tools/tfschema plugin"
	(cd "$repo" && go build -o "$work/bin/terraform-provider-tfschema" ./tools/tfschema/cmd/terraform-provider-tfschema &&
		go build -o "$work/bin/tfpolicy" ./tools/tfschema/cmd/tfpolicy)
	schema_abs=$(cd "$(dirname "$schema")" && pwd)/$(basename "$schema")
	includes=""
	for entry in "${providers[@]}"; do
		read -r addr version <<<"$entry"
		type=${addr##*/}
		dir="$work/mirror/$addr/$version/$platform"
		mkdir -p "$dir"
		# Terraform starts the plugin with no arguments of ours, so a wrapper
		# tells the one binary which provider of the file to serve.
		cat >"$dir/terraform-provider-${type}_v$version" <<-WRAP
			#!/bin/sh
			TFSCHEMA_FILE='$schema_abs' TFSCHEMA_PROVIDER='$addr' TFSCHEMA_DATA=placeholder exec '$work/bin/terraform-provider-tfschema' "\$@"
		WRAP
		chmod +x "$dir/terraform-provider-${type}_v$version"
		includes+="\"$addr\", "
	done
	cat >"$work/cli.tfrc" <<-CFG
		provider_installation {
		  filesystem_mirror {
		    path    = "$work/mirror"
		    include = [${includes%, }]
		  }
		  direct {
		    exclude = [${includes%, }]
		  }
		}
	CFG
	export TF_CLI_CONFIG_FILE="$work/cli.tfrc"
	offline=1
else
	offline=0
	printf 'tf-validate: NOTE: schema file %s not found (set TF_PROVIDERS_SCHEMA);\n' "$schema"
	printf 'tf-validate: NOTE: falling back to the real providers from the Terraform registry.\n'
fi

for d in "${dirs[@]}"; do
	rel=${d#"$repo"/}
	[ -f "$d/.terraform.lock.hcl" ] || created_locks+=("$d/.terraform.lock.hcl")
	export TF_DATA_DIR="$work/data/${rel//\//_}"
	step "$rel: init"
	if ! out=$(terraform -chdir="$d" init -backend=false -input=false -no-color 2>&1); then
		printf '%s\n' "$out" >&2
		# The documented fallback: no schema file and no registry either.
		# Nothing can be validated, which is a skip, not a failure.
		if [ "$offline" = 0 ] && grep -qiE 'Failed to query available provider packages|could not connect|no such host|i/o timeout|connection refused' <<<"$out"; then
			printf 'tf-validate: SKIP: no schema file (%s) and the Terraform registry is unreachable; only fmt was checked.\n' "$schema"
			exit 0
		fi
		die "terraform init failed in $rel"
	fi
	step "$rel: validate"
	terraform -chdir="$d" validate -no-color || die "terraform validate failed in $rel"
done

# validate cannot see plan-time problems (for_each keys unknown until apply,
# preconditions, ephemeral values where they may not go, the example
# variables file). Offline, a plan against the stand-in providers can: data
# sources read as placeholders, nothing is contacted, no state is written.
if [ "$offline" = 1 ]; then
	export TF_DATA_DIR="$work/data/terraform"
	# terraform.tfvars.example leaves the images unset (the first apply
	# comes before any image exists), so the second plan sets them: the
	# bridge's and the console's services and bindings are planned and their
	# IAM checked however this script is run. The third adds a
	# customer-managed key (kms_key_name): the CMEK settings and the service
	# agents' grants are planned too.
	for bridge in "without the bridge and the console" "with the bridge and the console" "with the console and a customer-managed key"; do
		args=(-var-file=terraform.tfvars.example)
		[ "$bridge" != "without the bridge and the console" ] && args+=(
			-var "bridge_image=europe-west1-docker.pkg.dev/my-jsdlq-project/jsdlq/bridge:v1"
			-var "console_image=europe-west1-docker.pkg.dev/my-jsdlq-project/jsdlq/console:v1"
			-var 'console_approvers=["group:jsdlq-operators@example.com"]'
		)
		[ "$bridge" = "with the console and a customer-managed key" ] && args+=(
			-var "kms_key_name=projects/my-jsdlq-project/locations/europe-west1/keyRings/jsdlq/cryptoKeys/data"
		)
		step "terraform: plan (offline, placeholder data sources, terraform.tfvars.example, $bridge)"
		planfile="$work/plan-${bridge// /-}"
		if ! out=$(terraform -chdir="$tfroot" plan -refresh=false -lock=false -input=false -no-color -out="$planfile" "${args[@]}" 2>&1); then
			printf '%s\n' "$out" >&2
			die "terraform plan failed ($bridge)"
		fi
		grep -E '^Plan:' <<<"$out" || die "terraform plan printed no summary ($bridge)"
		step "terraform: IAM rules on the plan (no allUsers/allAuthenticatedUsers; project roles only log/metric writers or README-listed)"
		terraform -chdir="$tfroot" show -json "$planfile" | "$work/bin/tfpolicy" -readme "$tfroot/README.md" ||
			die "IAM rules violated ($bridge)"
	done
else
	step "terraform: plan skipped (it needs the offline providers or real credentials)"
fi

step "ok: ${#dirs[@]} module(s) valid"
