/* The registry: one line per op, in id order. Append new ops at the end of
 * their family (an op's id is its position; look ops up by name). Each entry
 * names a descriptor `const mi_op mi_op_<name>` defined in the family file. */
/* unary.c */
MI_OP(neg) MI_OP(abs) MI_OP(sign) MI_OP(exp) MI_OP(log) MI_OP(sqrt) MI_OP(rsqrt)
MI_OP(square) MI_OP(reciprocal) MI_OP(pow_scalar) MI_OP(tanh) MI_OP(sigmoid) MI_OP(silu)
MI_OP(gelu) MI_OP(erf) MI_OP(relu) MI_OP(softplus) MI_OP(log_sigmoid) MI_OP(clamp)
MI_OP(add_scalar) MI_OP(mul_scalar)
/* binary.c */
MI_OP(add) MI_OP(sub) MI_OP(mul) MI_OP(div) MI_OP(maximum) MI_OP(minimum) MI_OP(where)
MI_OP(gt) MI_OP(ge) MI_OP(lt) MI_OP(le) MI_OP(eq)
/* reduce.c */
MI_OP(sum) MI_OP(mean) MI_OP(max) MI_OP(logsumexp) MI_OP(norm) MI_OP(sum_to)
/* linalg.c */
MI_OP(matmul) MI_OP(outer)
/* shape.c */
MI_OP(reshape) MI_OP(permute) MI_OP(slice) MI_OP(pad) MI_OP(concat) MI_OP(broadcast_to)
MI_OP(flip)
/* index.c */
MI_OP(index_select) MI_OP(index_add) MI_OP(gather) MI_OP(scatter_add)
/* nn.c */
MI_OP(softmax) MI_OP(log_softmax) MI_OP(cross_entropy) MI_OP(one_hot) MI_OP(layer_norm)
MI_OP(rms_norm) MI_OP(l2_normalize)
/* sequence.c */
MI_OP(conv1d_causal) MI_OP(conv1d_causal_wgrad) MI_OP(rope) MI_OP(attention)
MI_OP(attention_mask)
/* scan.c */
MI_OP(cumsum) MI_OP(cumprod) MI_OP(linear_scan)
/* miras.c */
MI_OP(soft_threshold) MI_OP(smooth_sign) MI_OP(smooth_abs) MI_OP(lq_normalize)
MI_OP(sphere_retract)
/* shape.c (appended: ids are append-only) */
MI_OP(narrow)
/* grad ops (unary.c / nn.c) */
MI_OP(gelu_backward) MI_OP(silu_backward) MI_OP(tanh_backward) MI_OP(sigmoid_backward)
MI_OP(softmax_backward) MI_OP(layer_norm_backward)
/* scan.c (appended) */
MI_OP(linear_scan_from)
/* linalg.c (appended) */
MI_OP(tri_solve)
/* delta_scan.c (appended) */
MI_OP(delta_scan) MI_OP(delta_scan_backward)
/* linalg.c (appended) */
MI_OP(matmul_acc)
/* cms_scan.c (appended) */
MI_OP(cms_scan) MI_OP(cms_scan_backward)
/* mlp_scan.c (appended) */
MI_OP(mlp_scan) MI_OP(mlp_scan_backward)
/* update.c (appended) */
MI_OP(outer_update) MI_OP(scale_add)
/* nn.c (appended) */
MI_OP(rms_norm_backward)
/* unary.c (appended) */
MI_OP(swiglu) MI_OP(swiglu_backward)
/* nn.c (appended) */
MI_OP(rms_norm_gain)
/* hope_scan.c (appended) */
MI_OP(hope_scan) MI_OP(hope_scan_backward)
