# Scenario: a project watching two providers, one of which (aws) already has
# a bridge identity in another project, with small instance limits.
#
#   python -m infra.package --out build/          # from the repository root
#   cd terraform/examples/two-providers
#   terraform init -backend-config="bucket=<STATE_BUCKET>" -backend-config="prefix=dcm-status/two-providers"
#   terraform apply -var project_id=<PROJECT>

provider "google" {
  project = var.project_id
  region  = var.region
}

module "dcm_status" {
  source = "../.."

  project_id         = var.project_id
  region             = var.region
  firestore_location = var.region

  cloud_providers = ["aws", "kubernetes"]
  provider_publishers = {
    aws = var.aws_bridge_member
  }

  # Zips built by `python -m infra.package --out build/` at the repository root.
  function_source_dir = "${path.module}/../../../build"

  function_defaults = {
    max_instance_count = 3
  }
  function_overrides = {
    upsert = { max_instance_count = 5 }
  }

  firestore_point_in_time_recovery = false
  labels                           = { env = "example" }
}
