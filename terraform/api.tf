# The status API and dashboard: the function `api`, declared `http: true` in
# infra/topology.yaml (every function so declared is handled the same way).
# It reads what it serves from Firestore and writes there only to register
# webhook callbacks (roles/datastore.user on this stack's database: Firestore
# has no per-collection IAM; topology.tf function_access). It reads the keyring
# that encrypts the callbacks' signing secrets (secrets.tf) and never publishes.
#
# It is private. Pub/Sub never calls it (no push subscription) and the push
# invoker may not invoke it (functions.tf); the only members with
# roles/run.invoker on its Cloud Run service are those of var.api_invokers
# (nobody by default; never allUsers or allAuthenticatedUsers, the variable
# refuses them). The Cloud Run invoker check lets a caller in; the function
# verifies who it is itself (the Google ID token of X-Serverless-Authorization
# when sent, else of Authorization, against DCM_API_AUDIENCE: functions.tf;
# or IAP's signed header), shared/api/callers.py.
#
# How an admin opens it (the admin's account, or a group of it, in api_invokers):
#
#   gcloud run services proxy <name_prefix>-api --region REGION --project PROJECT --port 8080
#
# then http://localhost:8080/ in a browser: the proxy adds the admin's
# identity token to every request (output api_proxy_command prints the exact
# command). Scripts call it with a token of their own:
#
#   curl -H "Authorization: Bearer $(gcloud auth print-identity-token)" "$(terraform output -raw api_url)/v1/summary"
#
# The network must let the request through as well: with the default
# ingress_settings (ALLOW_INTERNAL_ONLY) that is only from inside the project's
# VPC network. To open it from a workstation set api_ingress_settings =
# "ALLOW_ALL": the service is then reachable, and still refuses (403) every
# caller without roles/run.invoker.

resource "google_cloud_run_v2_service_iam_member" "api_invoker" {
  for_each = {
    for pair in setproduct(keys(local.http_functions), var.api_invokers) :
    "${pair[0]}/${pair[1]}" => { function = pair[0], member = pair[1] }
  }

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.function[each.value.function].name
  role     = "roles/run.invoker"
  member   = each.value.member
}

output "api_url" {
  description = "URL of the status API and dashboard (private: only api_invokers may call it, with an identity token; see terraform/api.tf)."
  value       = try(local.function_urls["api"], null)
}

output "api_proxy_command" {
  description = "Run this, then open http://localhost:8080/: the dashboard and the API through a local proxy that adds your identity token (you need to be in api_invokers)."
  value       = try("gcloud run services proxy ${local.functions["api"].name} --region ${var.region} --project ${var.project_id} --port 8080", null)
}
