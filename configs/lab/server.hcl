# configs/lab — a university lab: a server with four A100 40GB that students,
# staff and a course share.
#
# Three GPUs are carved into seven 1g.5gb MIG instances each: every student
# gets one small slice. The fourth holds two 3g.20gb instances for staff and
# teaching assistants. The department's PostgreSQL keeps the state, so a
# second GPU server can join later with the same database.

server {
  listen = "10.20.0.5:8443"

  tls {
    cert      = "/etc/gpuvm/tls/gpu-lab.crt"
    key       = "/etc/gpuvm/tls/gpu-lab.key"
    client_ca = "/etc/gpuvm/tls/campus-ca.crt"
  }

  database {
    driver = "postgres"
    # The password comes from ~gpuvm/.pgpass, not from this file.
    dsn = "postgres://gpuvm@db.lab.example.edu:5432/gpuvm?sslmode=verify-full"
  }

  plugins {
    backends = ["mig", "passthrough"]
  }

  host {
    gpu "all" {
      model      = "A100 PCIe 40GB"
      mode       = "mig"
      mig_layout = ["1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"]
    }

    gpu "0000:ca:00.0" {
      mode       = "mig"
      mig_layout = ["3g.20gb", "3g.20gb"]
    }
  }

  # Who changed what and who opened which console: the department keeps
  # access records two years; the log lines go to the campus log server too.
  audit {
    retention = "730d"
    log       = true
  }

  # The course datasets, read-only for students (enforced on the host), kept
  # up to date by staff. The ml101-lab profile mounts them in every session
  # at /gpuvm/shares/ml101-data.
  storage {
    share "ml101-data" {
      description = "ML101 course datasets"
      path        = "/srv/courses/ml101/data"
      read_write  = ["group:staff"]
      read_only   = ["group:ml101", "group:students"]
    }
  }
}
