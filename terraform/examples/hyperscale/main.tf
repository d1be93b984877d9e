# Scenario: the hyperscale fleet of docs/scale.md (5,000 providers, 10 million resources, 10,000 changes/s,
# a resync of 100,000 re-reports/s): the providers' lanes in a project of their own (Pub/Sub's 10,000 topics
# and subscriptions per project), the quotas the fleet needs, and upsert's instances. benchmarks/capacity.py
# reads this file: its hyperscale fleets are sized with what is declared here.
#
#   python -m infra.package --out build/          # from the repository root
#   cd terraform/examples/hyperscale
#   terraform init -backend-config="bucket=<STATE_BUCKET>" -backend-config="prefix=dcm-status/hyperscale"
#   terraform apply -var project_id=<PROJECT> -var lanes_project=<LANES_PROJECT> -var quota_contact=<EMAIL>

provider "google" {
  project = var.project_id
  region  = var.region
}

module "dcm_status" {
  source = "../.."

  project_id         = var.project_id
  region             = var.region
  firestore_location = var.region

  # The 5,000 providers' lanes: 5,000 topics and 5,000 subscriptions there, the ingress topics here.
  lanes_project = var.lanes_project

  # What benchmarks/capacity.py prints for the hyperscale resync ("quota to request"), rounded up.
  quota_preferences = {
    run_cpu                        = 3000
    pubsub_publisher_kb_per_minute = 32000000
    contact_email                  = var.quota_contact
  }

  function_source_dir = "${path.module}/../../../build"

  function_overrides = {
    upsert = { max_instance_count = 1600 }
    ingest = { max_instance_count = 1000 }
  }

  labels = { env = "hyperscale" }
}
