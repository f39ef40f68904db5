// Written by `cargo run --example gen_openapi` with v3.json: do not edit.
// Each group-version document of v3.json as (path, start, end): its bytes' range.
&[
    ("api/v1", 10, 383187),
    ("apis/admissionregistration.k8s.io/v1", 1142329, 1223304),
    ("apis/apiextensions.k8s.io/v1", 1223336, 1279883),
    ("apis/apiregistration.k8s.io/v1", 1279917, 1301675),
    ("apis/apps/v1", 451323, 711422),
    ("apis/authentication.k8s.io/v1", 1370217, 1392999),
    ("apis/authorization.k8s.io/v1", 1328302, 1370184),
    ("apis/autoscaling/v2", 951335, 997289),
    ("apis/batch/v1", 711439, 951312),
    ("apis/certificates.k8s.io/v1", 1301706, 1328270),
    ("apis/coordination.k8s.io/v1", 432773, 451307),
    ("apis/discovery.k8s.io/v1", 406211, 432742),
    ("apis/events.k8s.io/v1", 383212, 406183),
    ("apis/networking.k8s.io/v1", 1041058, 1089867),
    ("apis/policy/v1", 997307, 1023560),
    ("apis/rbac.authorization.k8s.io/v1", 1089904, 1123061),
    ("apis/scheduling.k8s.io/v1", 1023589, 1041029),
    ("apis/storage.k8s.io/v1", 1123087, 1142289),
]
