# /etc/gpuvm/policy.hcl — the rules of sharing: quotas, priorities, time
# windows, reservations, alerts. Without rules, every authenticated user may
# ask for any profile their groups allow, first come first served.
#
# policy {
#   group "students" {
#     quota {
#       vms    = 1
#       slices = 1
#     }
#   }
# }
