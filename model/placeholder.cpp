// Placeholder so the model library exists before its first component lands.
namespace calserve::model_placeholder { int anchor = 0; }
