"""ICIR-MCQ (paper §3.2, App. B): build, validate and load the balanced n5/n6 probe from COCO 2017
and MM-NIAH, plus the toy corpus (``icir_mcq.toy``) that stands in for them in tests and demos."""
